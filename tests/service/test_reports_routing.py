"""End to end: an action's report (a kill) reaches the chat, never the pager: one page per incident.

A real service reads a samples file; a NaN fires `loss_not_finite`, routed to a chat webhook, a PagerDuty
webhook and a kill notifier whose target is a real sleeping process. The chat gets the alert and the kill's
report; PagerDuty gets the alert's trigger only, unless its notifier says `reports: true`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from service_helpers import Alertd, wait_for

from alertd.config import load_config
from alertd.receivers import takes_reports
from alertd.testing.receiver import Receiver

RULES = """
sources: [{{name: raw, type: samples, path: "{samples}", interval: 0.2s}}]
notifiers:
  chat: {{type: webhook, format: generic, url: "{chat}"}}
  pager: {{type: webhook, format: pagerduty, url: "{pager}", routing_key: k1}}
  pager_all: {{type: webhook, format: pagerduty, url: "{pager_all}", routing_key: k2, reports: true}}
  stop: {{type: kill, target: pid, pid: {pid}, signals: [SIGINT], grace: 5s}}
route: {{receivers: [chat, pager, pager_all, stop], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: loss, condition: nonfinite, severity: critical}}
"""


def test_the_kill_report_goes_to_the_chat_not_to_the_pager(tmp_path: Path) -> None:
    chat, pager, pager_all = Receiver(), Receiver(), Receiver()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        RULES.format(samples=samples, chat=chat.url, pager=pager.url, pager_all=pager_all.url, pid=sleeper.pid)
    )
    alertd = Alertd(rules, tmp_path / "state")
    try:
        alertd.wait_log("alertd started")
        line = {"metric": "loss", "labels": {"run": "r1"}, "time": time.time(), "step": 5, "value": "NaN"}
        with samples.open("a") as f:
            f.write(json.dumps(line) + "\n")
        wait_for(lambda: len(chat.recorder.bodies) >= 2, "the alert and the report in the chat", 30, alertd)
        assert sleeper.wait(10) == -2  # the kill's SIGINT
        wait_for(lambda: len(pager_all.recorder.bodies) >= 2, "the report at the pager that asked for it", 30, alertd)
        time.sleep(1.0)  # nothing more is on its way to the pager
        reports = [b for b in chat.recorder.bodies if b["alerts"][0]["labels"].get("action") == "kill"]
        assert len(reports) == 1 and "sent SIGINT" in reports[0]["alerts"][0]["annotations"]["summary"]
        assert len(pager.recorder.bodies) == 1  # the incident's one page
        assert pager.recorder.bodies[0]["event_action"] == "trigger"
        assert "kill" not in json.dumps(pager.recorder.bodies[0])
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        alertd.stop()
        for r in (chat, pager, pager_all):
            r.stop()


def test_who_takes_reports_by_default(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        """
notifiers:
  console: {type: log}
  slack: {type: webhook, format: slack, url: "https://hooks.example/x"}
  pd: {type: webhook, format: pagerduty, routing_key: k}
  og: {type: webhook, format: opsgenie, api_key: k}
  po: {type: webhook, format: pushover, token: t, user: u}
  am: {type: alertmanager, url: "http://127.0.0.1:9093"}
  pd_too: {type: webhook, format: pagerduty, routing_key: k, reports: true}
  quiet_chat: {type: webhook, format: slack, url: "https://hooks.example/y", reports: false}
  stop: {type: kill, target: pid, pid: 1234}
rules: [{name: nf, metric: loss, condition: nonfinite}]
"""
    )
    cfg = load_config([str(path)])
    got = {name: takes_reports(n) for name, n in cfg.notifiers.items()}
    assert got == {
        "console": True,
        "slack": True,
        "pd": False,
        "og": False,
        "po": False,
        "am": True,  # Alertmanager routes the reports by their `action` label
        "pd_too": True,
        "quiet_chat": False,
        "stop": False,
    }
