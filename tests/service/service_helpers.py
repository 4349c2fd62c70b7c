"""Start `alertd` as a real subprocess and wait for what it does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class Alertd:
    """`python -m alertd --rules FILE --state-dir DIR`, logs captured to a file."""

    def __init__(self, rules: Path, state: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.log_path = state.parent / f"alertd-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alertd",
                "--rules",
                str(rules),
                "--state-dir",
                str(state),
                "--log-format",
                "json",
                *extra,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def logs(self) -> str:
        """Everything alertd printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 20.0) -> None:
        """Wait until alertd has printed `text`."""
        wait_for(lambda: text in self.logs(), f"alertd to log {text!r}", timeout, self)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 20.0, alertd: Alertd | None = None) -> Any:
    """Poll `cond` until it is truthy; fail with alertd's logs if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if alertd is not None and alertd.proc.poll() is not None:
            raise AssertionError(f"alertd exited ({alertd.proc.returncode}) while waiting for {what}:\n{alertd.logs()}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{alertd.logs()}" if alertd else ""))


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made here) while the block runs (root only)."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill_disk(directory: Path) -> Path:
    """Write zeros until the file system is full; the file that holds them."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return filler
