from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "service"))  # service_helpers: alertd as a subprocess

from slurm_testkit import LocalSlurm, missing


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """A real single-node Slurm for the module's tests (Debian's slurm-wlm: `.ci/run` installs it)."""
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users: it needs root (CI runs as root)")
    gone = missing()
    if gone:
        pytest.fail(f"slurm-wlm is not installed (missing {', '.join(gone)}): apt-get install slurm-wlm munge")
    cluster = LocalSlurm(Path(tmp_path_factory.mktemp("slurm"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()
