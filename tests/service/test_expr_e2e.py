"""End to end: an `expr` rule in alertd as a real process, beside a logdir written by tensorboard's writer,
a webhook on 127.0.0.1: the eval loss logged after the train loss still joins at its steps, and a restart
goes on where it stood."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver
from alertd.testing.tbwriter import ScalarWriter

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route:
  receivers: [hook]
  group_by: [rule, run]
  group_wait: 0s
  group_interval: 1s
  send_resolved: true
rules:
  - name: overfitting
    condition: {{expr: "`eval/loss` / `train/loss` > 1.5"}}
    annotations: {{summary: "eval/train {{{{ value }}}} at step {{{{ step }}}}"}}
"""


def bodies_for(receiver: Receiver, status: str) -> list[dict]:  # type: ignore[type-arg]
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [b for b in bodies if b["status"] == status and b["alerts"][0]["labels"]["alertname"] == "overfitting"]


def test_an_expr_rule_joins_a_late_series_and_survives_a_restart(tmp_path: Path) -> None:
    receiver = Receiver()
    logdir, rules, state = tmp_path / "runs", tmp_path / "rules.yaml", tmp_path / "state"
    rules.write_text(RULES.format(logdir=logdir, url=receiver.url))
    alertd = Alertd(rules, state)
    try:
        writer = ScalarWriter(logdir / "exp1")
        for step in range(0, 60, 10):  # the train loss first ...
            writer.add_scalar("train/loss", 1.0, step)
        writer.flush()
        alertd.wait_log("alertd started", timeout=30)
        time.sleep(1.5)  # read and evaluated alone: nothing to judge yet
        for step in range(0, 60, 10):  # ... the eval loss afterwards, pulling away at step 40
            writer.add_scalar("eval/loss", 2.0 if step == 40 else 1.2, step)
        writer.flush()
        (body,) = wait_for(lambda: bodies_for(receiver, "firing"), "the overfitting alert", 30, alertd)
        (alert,) = body["alerts"]
        assert alert["labels"]["metric"] == "eval/loss" and alert["labels"]["run"] == "exp1"
        assert alert["annotations"]["summary"] == "eval/train 2 at step 40"
        # step 50 (ratio 1.2) resolves it
        wait_for(lambda: bodies_for(receiver, "resolved"), "the resolution", 30, alertd)
        assert alertd.stop(signal.SIGTERM) == 0

        restarted = Alertd(rules, state)
        restarted.wait_log("state restored")
        writer.add_scalar("train/loss", 1.0, 60)
        writer.add_scalar("eval/loss", 3.0, 60)
        writer.flush()
        wait_for(lambda: len(bodies_for(receiver, "firing")) == 2, "the second firing", 30, restarted)
        last = bodies_for(receiver, "firing")[-1]["alerts"][0]
        assert last["annotations"]["summary"] == "eval/train 3 at step 60"  # steps 0-50 were not judged again
        assert restarted.stop(signal.SIGINT) == 0
        writer.close()
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
