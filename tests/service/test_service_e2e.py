"""End to end: alertd as a real process beside a logdir written by tensorboard's writer, a webhook on 127.0.0.1."""

from __future__ import annotations

import math
import signal
from pathlib import Path

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver
from alertd.testing.tbwriter import ScalarWriter

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
  - {{name: broken, type: samples, path: "{broken}", interval: 0.2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route:
  receivers: [hook]
  group_by: [rule, run]
  group_wait: 0s
  group_interval: 1s
  send_resolved: true
rules:
  - name: loss_not_finite
    metric: ["*loss"]
    condition: nonfinite
    severity: critical
    annotations: {{summary: "{{{{ metric }}}} is {{{{ value }}}} at step {{{{ step }}}} in {{{{ labels.run }}}}"}}
  - name: source_down
    metric: alertd.source.up
    condition: "< 1"
    for: 1s
"""


@pytest.fixture
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    receiver = Receiver()
    logdir = tmp_path / "runs"
    broken = tmp_path / "not-a-file"
    broken.mkdir()  # A samples source pointed at a directory fails at every poll.
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=logdir, broken=broken, url=receiver.url))
    yield receiver, logdir, rules, tmp_path / "state"
    receiver.stop()


def bodies_for(receiver: Receiver, rule: str, status: str) -> list[dict]:  # type: ignore[type-arg]
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [b for b in bodies if b["status"] == status and b["alerts"][0]["labels"]["alertname"] == rule]


def test_a_nan_loss_reaches_the_webhook_and_a_restart_neither_repeats_nor_rereads(setup) -> None:  # type: ignore[no-untyped-def]
    receiver, logdir, rules, state = setup
    alertd = Alertd(rules, state)
    try:
        writer = ScalarWriter(logdir / "exp1")
        for step in range(0, 30, 10):
            writer.add_scalar("train/loss", 2.0 - step / 100, step)
        writer.add_scalar("train/loss", math.nan, 30)
        writer.flush()
        (body,) = wait_for(lambda: bodies_for(receiver, "loss_not_finite", "firing"), "the NaN alert", 30, alertd)
        assert body["version"] == "4" and body["receiver"] == "hook"
        (alert,) = body["alerts"]
        assert alert["labels"]["metric"] == "train/loss" and alert["labels"]["run"] == "exp1"
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["source"] == "tb"
        assert alert["annotations"]["summary"] == "train/loss is NaN at step 30 in exp1"
        assert alert["endsAt"] == "0001-01-01T00:00:00Z"
        # A failing source is visible as a series a rule can alert on, and alertd keeps running.
        wait_for(lambda: bodies_for(receiver, "source_down", "firing"), "the source_down alert", 30, alertd)
        assert "source broken failed" in alertd.logs()
        assert alertd.stop(signal.SIGTERM) == 0
        assert "alertd stopped" in alertd.logs()

        restarted = Alertd(rules, state)
        restarted.wait_log("state restored")
        writer.add_scalar("train/loss", 1.5, 40)  # The loss is finite again: the alert resolves.
        writer.flush()
        wait_for(lambda: bodies_for(receiver, "loss_not_finite", "resolved"), "the resolution", 30, restarted)
        assert len(bodies_for(receiver, "loss_not_finite", "firing")) == 1  # Not sent again after the restart.
        assert restarted.stop(signal.SIGINT) == 0
        writer.close()
    finally:
        alertd.stop(signal.SIGKILL)


def test_a_bad_rules_file_exits_1_naming_the_problem(tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text("rules:\n  - {name: a, metric: loss, condition: nonfinite, bogus: 1}\n")
    alertd = Alertd(rules, tmp_path / "state")
    assert alertd.proc.wait(30) == 1
    alertd.stop()  # exited already: no signal, its log file closed
    assert "rules[0].bogus: unknown key 'bogus'" in alertd.logs()


def test_sigkill_during_an_outage_loses_nothing_and_sends_nothing_twice(setup) -> None:  # type: ignore[no-untyped-def]
    receiver, logdir, rules, state = setup
    port = receiver.port
    receiver.stop()  # The chat service is down.
    alertd = Alertd(rules, state)
    try:
        writer = ScalarWriter(logdir / "exp2")
        writer.add_scalar("train/loss", 1.0, 0)
        writer.add_scalar("train/loss", math.nan, 1)
        writer.flush()
        alertd.wait_log('"state": "firing"')
        wait_for(lambda: "delivery" in alertd.logs() and "hook" in alertd.logs(), "a failed delivery", 20, alertd)
        assert alertd.stop(signal.SIGKILL) == -signal.SIGKILL
        up = Receiver(port=port)  # The service is back.
        try:
            restarted = Alertd(rules, state)
            wait_for(lambda: bodies_for(up, "loss_not_finite", "firing"), "the delivery after recovery", 30, restarted)
            restarted.wait_log("source_down")  # Give it time to (wrongly) send anything twice.
            (body,) = bodies_for(up, "loss_not_finite", "firing")
            assert body["alerts"][0]["labels"]["run"] == "exp2"
            assert restarted.stop() == 0
        finally:
            up.stop()
        writer.close()
    finally:
        alertd.stop(signal.SIGKILL)


def test_sighup_reloads_the_rules_and_a_bad_file_keeps_the_old_ones(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, rules, state = setup
    alertd = Alertd(rules, state)
    try:
        alertd.wait_log("alertd started")
        rules.write_text(rules.read_text() + "  - {name: extra, metric: lr, condition: '<= 0'}\n")
        alertd.proc.send_signal(signal.SIGHUP)
        alertd.wait_log("rules reloaded: 3 rules (2 unchanged)")
        rules.write_text("rules: [{name: broken, metric: x, condition: maybe}]\n")
        alertd.proc.send_signal(signal.SIGHUP)
        alertd.wait_log("reload refused, the running rules stay")
        assert "unknown condition 'maybe'" in alertd.logs()
        assert alertd.stop() == 0
    finally:
        alertd.stop(signal.SIGKILL)
