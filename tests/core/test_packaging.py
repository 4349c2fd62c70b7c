"""Packaging as Python users expect it: one version, the license shipped, extras that pin torch exactly."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import metadata, version
from pathlib import Path

import alertd

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_alertd_version_prints_the_installed_distributions_version() -> None:
    script = Path(sys.executable).parent / "alertd"  # the console script pip installed, as a user runs it
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"alertd {version('alertd')}\n"
    assert done.stderr == ""


def test_the_version_is_written_once_in_the_package() -> None:
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "alertd.__version__"}
    # The installed metadata was built from it (a stale install fails here: `make test` reinstalls on a change).
    assert version("alertd") == alertd.__version__


def test_the_license_is_the_full_apache_2_text_and_the_metadata_says_so() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    for part in ("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "9. Accepting Warranty or Additional"):
        assert part in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License to your work." in text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    meta = metadata("alertd")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]


def test_torch_is_pinned_exactly_in_every_extra() -> None:
    extras: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
    torch = [req for reqs in extras.values() for req in reqs if req.split("=")[0].split(">")[0].strip() == "torch"]
    assert torch and set(torch) == {"torch==2.13.0"}
    assert not any(req.startswith("torch") for req in PYPROJECT["project"]["dependencies"])


def test_the_test_extra_takes_every_optional_extra() -> None:
    extras: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
    optional = set(extras) - {"test", "dev"}
    assert {"hf", "lightning", "apprise"} <= optional
    (self_ref,) = [req for req in extras["test"] if req.startswith("alertd[")]
    assert set(self_ref.removeprefix("alertd[").removesuffix("]").split(",")) == optional
