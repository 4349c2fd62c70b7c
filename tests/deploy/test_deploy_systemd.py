"""The systemd unit: `systemd-analyze verify` accepts it without one warning.

Where `systemd-analyze` is not installed, a strict parser stands in (it is not skipped): the
sections must be [Unit], [Service] and [Install], every key must be one this test knows for its
section, booleans must be booleans, and ExecStart/ExecReload must name absolute programs. It is
weaker than systemd's own check; the test says which of the two ran in its assertion messages.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from deploy_files import UNIT, unit_values

KNOWN = {
    "Unit": set(["Description", "Documentation", "Wants", "Requires", "After", "Before", "ConditionPathExists"]),
    "Service": set(
        [
            "Type",
            "User",
            "Group",
            "SupplementaryGroups",
            "StateDirectory",
            "StateDirectoryMode",
            "WorkingDirectory",
            "Environment",
            "EnvironmentFile",
            "ExecStart",
            "ExecReload",
            "Restart",
            "RestartSec",
            "TimeoutStopSec",
            "UMask",
            "NoNewPrivileges",
            "ProtectSystem",
            "ProtectHome",
            "PrivateTmp",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectKernelLogs",
            "ProtectControlGroups",
            "ProtectClock",
            "ProtectHostname",
            "LockPersonality",
            "RestrictRealtime",
            "RestrictSUIDSGID",
            "RestrictNamespaces",
            "RemoveIPC",
            "SystemCallArchitectures",
            "SystemCallFilter",
            "SystemCallErrorNumber",
            "RestrictAddressFamilies",
            "CapabilityBoundingSet",
            "AmbientCapabilities",
            "PrivateDevices",
            "DevicePolicy",
            "DeviceAllow",
            "ReadWritePaths",
            "ReadOnlyPaths",
        ]
    ),
    "Install": {"WantedBy"},
}
BOOLEANS = set(
    [
        "NoNewPrivileges",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "LockPersonality",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "RestrictNamespaces",
        "RemoveIPC",
    ]
)
ENUMS = {
    "ProtectSystem": {"strict"},
    "ProtectHome": {"read-only", "tmpfs", "yes"},
    "DevicePolicy": {"closed", "strict", "auto"},
    "Restart": {"on-failure", "always"},
    "Type": {"simple", "exec", "notify"},
}


def _fallback_problems(text: str) -> list[str]:
    problems, section = [], None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            if section not in KNOWN:
                problems.append(f"line {n}: unknown section [{section}]")
            continue
        key, sep, value = line.partition("=")
        if not sep or section is None:
            problems.append(f"line {n}: not KEY=value inside a section: {line!r}")
        elif key not in KNOWN.get(section, set()):
            problems.append(f"line {n}: unknown key {key!r} in [{section}]")
        elif key in BOOLEANS and value not in {"yes", "no", "true", "false"}:
            problems.append(f"line {n}: {key} wants a boolean, got {value!r}")
        elif key in ENUMS and value not in ENUMS[key]:
            problems.append(f"line {n}: {key}={value!r} is not one of {sorted(ENUMS[key])}")
        elif key.startswith("Exec") and not value.startswith("/"):
            problems.append(f"line {n}: {key} must start with an absolute path")
    return problems


def _verify(tmp_path: Path, text: str) -> list[str]:
    """Warnings and errors about the unit `text`: from systemd-analyze when present, else the fallback."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return [f"(fallback parser, no systemd-analyze) {p}" for p in _fallback_problems(text)]
    # verify wants ExecStart's program to exist: point it at a stand-in executable.
    stub = tmp_path / "alertd"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    unit = tmp_path / "alertd.service"
    unit.write_text(text.replace("/opt/alertd/bin/alertd", str(stub)))
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    return lines + ([f"systemd-analyze verify exited {r.returncode}"] if r.returncode else [])


def test_the_unit_verifies_without_a_warning(tmp_path: Path) -> None:
    assert _verify(tmp_path, UNIT.read_text()) == []


def test_the_check_reports_a_misspelt_key_and_a_bad_value(tmp_path: Path) -> None:
    text = UNIT.read_text().replace("ProtectHome=read-only", "ProtectHomee=read-only")
    text = text.replace("DevicePolicy=closed", "DevicePolicy=closedd")
    problems = "\n".join(_verify(tmp_path, text))
    assert "ProtectHomee" in problems
    assert "closedd" in problems


def test_state_reload_and_hardening_are_as_documented() -> None:
    assert unit_values("User") == ["alertd"]
    assert unit_values("StateDirectory") == ["alertd"]
    assert "ALERTD_STATE_DIR=%S/alertd" in unit_values("Environment")
    assert unit_values("EnvironmentFile") == ["-/etc/alertd/alertd.env"]
    assert unit_values("ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert unit_values("Restart") == ["on-failure"]
    assert unit_values("CapabilityBoundingSet") == [""]
    assert unit_values("ProtectSystem") == ["strict"] and unit_values("ProtectHome") == ["read-only"]
    assert unit_values("DevicePolicy") == ["closed"]
    assert unit_values("DeviceAllow") == ["char-nvidia-frontend rw", "char-nvidia-caps r"]
    assert unit_values("PrivateDevices") == ["no"]


def test_the_fallback_parser_agrees_on_the_unit_and_on_the_typos() -> None:
    text = UNIT.read_text()
    assert _fallback_problems(text) == []
    bad = text.replace("ProtectHome=read-only", "ProtectHomee=read-only").replace("Restart=on-failure", "Restart=x")
    problems = "\n".join(_fallback_problems(bad))
    assert "unknown key 'ProtectHomee' in [Service]" in problems
    assert "Restart='x'" in problems
