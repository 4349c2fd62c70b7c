"""End to end: alertd as a real process tailing a plain train.log, as the classic shell loop does."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from service_helpers import Alertd, wait_for
from test_service_e2e import bodies_for

from alertd.testing.receiver import Receiver

RULES = """
sources:
  - {{name: logs, type: textlog, path: "{logs}/*.log", interval: 0.2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s, group_interval: 1s}}
rules:
  - name: loss_not_finite
    metric: ["*loss"]
    condition: nonfinite
    severity: critical
    annotations: {{summary: "{{{{ metric }}}} is {{{{ value }}}} at step {{{{ step }}}} in {{{{ labels.run }}}}"}}
  - name: run_crashed
    metric: run.crashed
    condition: "> 0"
    severity: critical
"""


def test_a_nan_line_and_a_crash_in_a_growing_log_reach_the_webhook(tmp_path: Path) -> None:
    receiver = Receiver()
    logs = tmp_path / "logs"
    logs.mkdir()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logs=logs, url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state")
    try:
        alertd.wait_log("alertd started")
        with open(logs / "train.log", "w") as log:
            for step in range(1, 4):
                log.write(f"step={step} loss={2.0 / step:.3f}\n")
                log.flush()
                time.sleep(0.1)
            log.write("step=4 lo")  # a line cut in the middle of a write
            log.flush()
            time.sleep(0.5)
            log.write("ss=nan\n")
            log.flush()
            (body,) = wait_for(lambda: bodies_for(receiver, "loss_not_finite", "firing"), "the NaN alert", 30, alertd)
            assert body["alerts"][0]["annotations"]["summary"] == "loss is NaN at step 4 in train.log"
            log.write('Traceback (most recent call last):\n  File "train.py", line 1\nRuntimeError: boom\n')
            log.flush()
            (crash,) = wait_for(lambda: bodies_for(receiver, "run_crashed", "firing"), "the crash alert", 30, alertd)
            assert crash["alerts"][0]["labels"]["run"] == "train.log"
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
