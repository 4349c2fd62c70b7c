"""A child for the kill tests that ignores SIGINT and SIGTERM, noting each one it receives.

Each received signal's name is appended as a line to LOG. It writes READY once its handlers are
installed, then sleeps (at most 60 s, so a failed test leaves no process behind for long).

Usage: stubborn_script.py LOG READY [TOKEN...]   (TOKEN only marks the command line for cmdline targets)
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType

log, ready = Path(sys.argv[1]), Path(sys.argv[2])


def note(signum: int, frame: FrameType | None) -> None:
    """Record the signal and carry on."""
    with log.open("a") as f:
        f.write(signal.Signals(signum).name + "\n")


signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
ready.write_text("ready")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
