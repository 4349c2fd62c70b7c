"""End to end: a trainer whose loss goes NaN is stopped by alertd's kill notifier, and people are told."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver

TRAINER = r"""
import math, signal, sys, time
from pathlib import Path
from alertd.testing.tbwriter import ScalarWriter
from alertd.runs.writers import hold
work = Path(sys.argv[1])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
w = ScalarWriter(work / "runs" / "exp1")
w.flush()
held = hold(w.path)  # torch's writer holds no file open: this one does, so alertd can verify it
for step in range(1000):
    loss = math.nan if step == 20 else 2.0 - step / 1000
    w.add_scalar("train/loss", loss, step)
    w.flush()
    if stop:
        (work / "checkpoint.pt").write_text(f"step {step}")
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
  stop: {{type: kill, target: writer, signals: [SIGINT, SIGTERM, SIGKILL], grace: 20s}}
route:
  receivers: [hook]
  group_wait: 0s
  routes: [{{match: {{severity: critical}}, receivers: [hook, stop]}}]
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


def test_a_nan_stops_the_trainer_after_a_checkpoint_and_the_action_is_reported(tmp_path: Path) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=tmp_path / "runs", url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state")
    try:
        alertd.wait_log("alertd started")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path)], env=env)
        assert trainer.wait(60) == 0  # It saved its checkpoint and left on SIGINT; exit 3 would mean no signal.
        assert (tmp_path / "checkpoint.pt").read_text().startswith("step ")

        def report() -> list[str]:
            with receiver.recorder.lock:
                bodies = list(receiver.recorder.bodies)
            return [
                a["annotations"]["summary"] for b in bodies for a in b["alerts"] if a["labels"].get("action") == "kill"
            ]

        (summary,) = wait_for(report, "the kill report at the webhook", 40, alertd)
        assert f"pid {trainer.pid}" in summary and "sent SIGINT" in summary and "exited" in summary
        assert "SIGTERM" not in summary and "SIGKILL" not in summary
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
