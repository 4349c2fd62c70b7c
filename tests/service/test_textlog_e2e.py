"""End to end: alertd as a real process tailing a plain train.log, as the classic shell loop does."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
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


FIRST_HOUR = """
sources:
  - {{name: logs, type: textlog, path: "{logs}/*.log", interval: 0.2s}}
notifiers:
  console: {{type: log}}
route: {{receivers: [console], group_by: [rule, run], group_wait: 0s, group_interval: 1s}}
rules:
  - name: loss_high
    metric: loss
    condition: "> 5"
    severity: info
    annotations:
      summary: "{{{{ metric }}}} is {{{{ value }}}} (> 5)"
      resolved_summary: "{{{{ metric }}}} is back under 5 ({{{{ value }}}})"
  - name: grad_high
    metric: grad_norm
    condition: "> 100"
    severity: warning
    annotations: {{summary: "{{{{ metric }}}} is {{{{ value }}}} (> 100)"}}
  - {{name: typo, metric: nothing, condition: "> 1", severity: critcal}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_first_hour_a_spaced_log_levels_resolutions_and_a_log_that_matches_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "prose.log").write_text("".join(f"epoch {i} took a while\n" for i in range(25)))
    rules = tmp_path / "rules.yaml"
    rules.write_text(FIRST_HOUR.format(logs=logs))
    port = free_port()
    alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{port}")
    try:
        alertd.wait_log("alertd started")
        with open(logs / "train.log", "w") as log:
            log.write("step 1 loss 6 grad_norm 150\n")
            log.flush()
            wait_for(
                lambda: "status=firing level=warning [FIRING:1] grad_high" in alertd.logs(), "grad_high", 30, alertd
            )
            log.write("step 2 loss 2 grad_norm 1.1\n")
        wait_for(lambda: alertd.logs().count("status=resolved") == 2, "both resolutions", 30, alertd)
        lines = alertd.logs().splitlines()
        notes = [x for x in lines if x.startswith("alertd notify ")]
        assert any(
            x.startswith("alertd notify receiver=console status=firing level=info [FIRING:1] loss_high") for x in notes
        )
        (loss_back,) = [x for x in notes if "status=resolved" in x and "loss_high" in x]
        assert "RESOLVED loss_high: loss back to 2 at step 2 in run train.log (" in loss_back
        assert loss_back.endswith("): loss is back under 5 (2)") and "level=info" in loss_back
        (grad_back,) = [x for x in notes if "status=resolved" in x and "grad_high" in x]
        assert "RESOLVED grad_high: grad_norm back to 1.1 at step 2 in run train.log (" in grad_back
        assert "(> 100)" not in grad_back  # the firing summary is not repeated as if it still held
        logged = [json.loads(x) for x in lines if x.startswith("{")]
        levels = {tuple(x["msg"].split(" ")[1:3]): x["level"] for x in logged if x["msg"].startswith("alert ")}
        assert levels == {
            ("loss_high", "firing"): "info",  # an info alert is logged at INFO
            ("loss_high", "resolved"): "info",
            ("grad_high", "firing"): "warning",
            ("grad_high", "resolved"): "info",
        }
        warned = [(x["level"], x["msg"]) for x in logged if "critcal" in x["msg"] or "none matched" in x["msg"]]
        assert warned[0] == (
            "warning",
            f"rules: {rules}:20: rules[2].severity: severity 'critcal' is used by no route and no other rule; "
            "did you mean 'critical'?",
        )
        assert warned[1][0] == "warning" and warned[1][1].startswith(f"log file {logs}/prose.log: 25 lines read, none")
        assert len(warned) == 2  # once each
        sources = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/sources", timeout=10).read())
        (logs_source,) = sources
        assert logs_source["state"] == "up" and logs_source["note"].startswith(f"{logs}/prose.log: 25 lines read")
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
