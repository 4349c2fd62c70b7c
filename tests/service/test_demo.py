"""`make demo` (examples/demo.py) as a person runs it: from a directory holding an old log with a NaN."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_the_demo_alerts_on_its_own_nan_within_seconds_whatever_the_directory_holds(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "old.log").write_text("step=1 loss=nan\n")  # a NaN the default rules would read from ./logs
    (tmp_path / "runs" / "old-run").mkdir(parents=True)
    done = subprocess.run([sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (delay,) = re.findall(r">>> alerted (\d+\.\d) s after the NaN was written", done.stdout)
    assert 0.0 <= float(delay) < 15.0  # seconds on one clock, not the machine's uptime
    assert "old.log" not in done.stdout and "before the NaN" not in done.stdout
    assert "demo done" in done.stdout
