"""deploy/multinode/: every file passes its own tool's check (alertd, amtool, promtool, systemd-analyze), and
the files agree on the addresses (every Alertmanager peer listed everywhere, alertd's port scraped).

tests/alertmanager/test_am_peers_cluster.py runs these same files with two alertd nodes and two peers.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_files import DEPLOY, UNIT, parse_invocation, unit_values

from alertd.config import load_config

MULTINODE = DEPLOY / "multinode"
DROP_IN = MULTINODE / "alertd.service.d" / "listen.conf"


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: apt-get install {package}", pytrace=False)
    return found


def _env_example() -> dict[str, str]:
    lines = (MULTINODE / "alertd.env.example").read_text().splitlines()
    return dict(ln.split("=", 1) for ln in lines if ln.strip() and not ln.startswith("#"))


def _peer_args() -> list[str]:
    (args,) = re.findall(r'^ARGS="(.*)"$', (MULTINODE / "prometheus-alertmanager.default").read_text(), re.M)
    return shlex.split(args)


def _prometheus() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((MULTINODE / "prometheus.yml").read_text())
    return data


def _targets(job: str) -> list[str]:
    (scrape,) = [j for j in _prometheus()["scrape_configs"] if j["job_name"] == job]  # type: ignore[attr-defined]
    return [t for sc in scrape["static_configs"] for t in sc["targets"]]


def test_the_rules_load_and_post_to_every_peer_with_the_kill_kept_on_the_node() -> None:
    env = _env_example()
    cfg = load_config([str(MULTINODE / "rules.yaml")], env)
    wanted = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", (MULTINODE / "rules.yaml").read_text()))
    assert wanted <= set(env), f"alertd.env.example does not set {wanted - set(env)}"
    assert {n: c.type for n, c in cfg.notifiers.items()} == {"am": "alertmanager", "stop": "kill"}
    am = cfg.notifiers["am"]
    assert am.peers == ["http://am1.example:9093", "http://am2.example:9093"]  # type: ignore[union-attr]
    assert cfg.route.receivers == ["am"]
    (critical,) = cfg.route.routes
    assert critical.match == {"severity": "critical"} and critical.receivers == ["am", "stop"]


def test_the_files_name_the_same_peers_everywhere() -> None:
    cfg = load_config([str(MULTINODE / "rules.yaml")], _env_example())
    peers = [p.removeprefix("http://") for p in cfg.notifiers["am"].peers]  # type: ignore[union-attr]
    alerting = _prometheus()["alerting"]["alertmanagers"]  # type: ignore[index]
    assert [t for am in alerting for sc in am["static_configs"] for t in sc["targets"]] == peers
    assert _targets("alertmanager") == peers
    gossip = [a.split("=", 1)[1] for a in _peer_args() if a.startswith("--cluster.peer=")]
    assert gossip == [p.replace(":9093", ":9094") for p in peers]
    assert "--cluster.listen-address=0.0.0.0:9094" in _peer_args()


def test_the_drop_in_listens_on_every_address_on_the_scraped_port(tmp_path: Path) -> None:
    lines = [ln.split("=", 1)[1] for ln in DROP_IN.read_text().splitlines() if ln.startswith("ExecStart=")]
    assert lines[0] == ""  # clears the unit's ExecStart first
    (argv,) = [shlex.split(ln) for ln in lines[1:]]
    ours, unit = parse_invocation(argv), parse_invocation(shlex.split(unit_values("ExecStart")[0]))
    assert ours.listen == "0.0.0.0:9090" and unit.listen == "127.0.0.1:9090"
    assert (ours.command, ours.rules, ours.state_dir) == (unit.command, unit.rules, unit.state_dir)
    assert {t.rsplit(":", 1)[1] for t in _targets("alertd")} == {"9090"}
    # systemd reads the unit with the drop-in beside it, and says nothing about either.
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # no systemd here: at least the drop-in's shape (its unit has its own fallback check)
        body = [ln for ln in DROP_IN.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert body[0] == "[Service]" and all(ln.startswith("ExecStart=") for ln in body[1:])
        return
    stub = tmp_path / "alertd"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    (tmp_path / "alertd.service.d").mkdir()
    for src, dst in ((UNIT, tmp_path / "alertd.service"), (DROP_IN, tmp_path / "alertd.service.d" / "listen.conf")):
        dst.write_text(src.read_text().replace("/opt/alertd/bin/alertd", str(stub)))
    r = subprocess.run([analyze, "verify", str(tmp_path / "alertd.service")], capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    (tmp_path / "alertd.service.d" / "listen.conf").write_text("[Service]\nExecStartt=/bin/true\n")
    r = subprocess.run([analyze, "verify", str(tmp_path / "alertd.service")], capture_output=True, text=True)
    assert "ExecStartt" in r.stdout + r.stderr  # the drop-in is really read


def test_amtool_accepts_the_alertmanager_config() -> None:
    amtool = _tool("amtool", "prometheus-alertmanager")
    r = subprocess.run([amtool, "check-config", str(MULTINODE / "alertmanager.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = _tool("promtool", "prometheus")
    r = subprocess.run([promtool, "check", "config", str(MULTINODE / "prometheus.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout
