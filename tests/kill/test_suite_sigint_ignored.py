"""The tests pass when the suite itself starts with SIGINT ignored, as a shell's background job (`make test &`,
nohup) or some CI runners start it: the processes the tests start get SIGINT at its default disposition
(tests/conftest.py), as from a terminal. A nested pytest over the tests that failed that way: a trainer
that must die of alertd's SIGINT, and the HF Trainer whose second SIGINT must abort its step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = [
    "tests/kill/test_kill_refusals.py::test_another_users_process",
    "tests/integrations/test_integ_hf.py::test_second_sigint_aborts_with_keyboard_interrupt",
]


def test_the_suite_started_with_sigint_ignored_passes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"), *TESTS],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # what `&` and nohup do
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{len(TESTS)} passed" in done.stdout
