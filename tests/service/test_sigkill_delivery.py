"""Crash timings against a real alertd: SIGKILL at any moment neither loses nor re-keys a notification.

A receiver that drops by idempotency key must see each transition once: every distinct notification
(status and alerts) arrives under exactly one key, however often alertd was killed on the way.
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from pathlib import Path

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver

RULES = """
sources: [{{name: s, type: samples, path: "{path}", interval: 0.2s}}]
notifiers: {{hook: {{type: webhook, url: "{url}", timeout: 2s}}}}
route: {{receivers: [hook], group_by: [run], group_wait: 0s, group_interval: {gi}, repeat_interval: 1h}}
{extra}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""


def _line(run: str, t: float, step: int, value: float) -> str:
    v = "NaN" if math.isnan(value) else value
    return json.dumps({"metric": "loss", "labels": {"source": "s", "run": run}, "time": t, "step": step, "value": v})


def _setup(tmp_path: Path, receiver: Receiver, gi: str = "1s", extra: str = "") -> tuple[Path, Path, Path]:
    samples, state, rules = tmp_path / "samples.jsonl", tmp_path / "state", tmp_path / "rules.yaml"
    samples.touch()
    rules.write_text(RULES.format(path=samples, url=receiver.url, gi=gi, extra=extra))
    return samples, state, rules


@pytest.mark.slow
def test_sigkills_with_a_flapping_receiver_deliver_each_notification_under_one_key(tmp_path: Path) -> None:
    receiver = Receiver()
    receiver.recorder.fail_every = 3
    samples, state, rules = _setup(tmp_path, receiver)
    t0 = time.time() - 100
    runs = [f"r{i}" for i in range(10)]
    with samples.open("w") as f:  # each run: a NaN, then a finite loss: firing, then resolved
        for i, run in enumerate(runs):
            for step, value in ((0, 1.0), (1, math.nan), (2, 1.0)):
                f.write(_line(run, t0 + i + step / 10, step, value) + "\n")
    rng = random.Random(7)
    alertd = None
    try:
        alertd = Alertd(rules, state)
        every = 2 * len(runs)  # each run's firing and its resolution
        wait_for(lambda: len(receiver.recorder.keys_by_content()) >= every, "every notification", 30, alertd)
        for _ in range(5):  # killed after everything went out, then at random moments in the first seconds
            alertd.stop(signal.SIGKILL)
            alertd = Alertd(rules, state)
            time.sleep(rng.uniform(0.5, 3.0))
        alertd.stop(signal.SIGKILL)
        alertd = Alertd(rules, state)
        time.sleep(3.0)  # nothing more may come
        assert alertd.stop() == 0
    finally:
        if alertd is not None:
            alertd.stop(signal.SIGKILL)
        receiver.stop()
    by_content = receiver.recorder.keys_by_content()
    assert len(by_content) == every  # nothing else
    statuses = sorted(json.loads(c)[0] for c in by_content)
    assert statuses == ["firing"] * len(runs) + ["resolved"] * len(runs)
    many = {c: keys for c, keys in by_content.items() if len(keys) > 1}
    assert not many, f"notifications delivered under several keys: {many}"


@pytest.mark.slow
def test_a_resolution_waiting_for_its_group_interval_survives_a_sigkill(tmp_path: Path) -> None:
    receiver = Receiver()
    samples, state, rules = _setup(tmp_path, receiver, gi="20s")
    now = time.time()
    samples.write_text(_line("a", now, 0, 1.0) + "\n" + _line("a", now, 1, math.nan) + "\n")
    alertd = None
    try:
        alertd = Alertd(rules, state)
        wait_for(lambda: receiver.recorder.delivered(), "the firing notification", alertd=alertd)
        with samples.open("a") as f:
            f.write(_line("a", time.time(), 2, 1.0) + "\n")
        alertd.wait_log('"state": "resolved"')
        time.sleep(11)  # past the old periodic save: the resolution is only in a group waiting 20 s
        alertd.stop(signal.SIGKILL)
        alertd = Alertd(rules, state)
        statuses = lambda: [b["status"] for b in receiver.recorder.bodies]  # noqa: E731
        wait_for(lambda: "resolved" in statuses(), "the resolution after the restart", 30, alertd)
        assert alertd.stop() == 0
    finally:
        if alertd is not None:
            alertd.stop(signal.SIGKILL)
        receiver.stop()
    assert statuses() == ["firing", "resolved"]


def test_a_retry_after_of_a_year_is_capped_and_holds_no_other_group(tmp_path: Path) -> None:
    receiver = Receiver()
    receiver.recorder.responses = [(429, {"Retry-After": "31536000"})]
    samples, state, rules = _setup(tmp_path, receiver, extra="delivery: {max_retry_after: 2s}")
    now = time.time()
    lines = [_line("a", now, 1, math.nan), _line("b", now + 0.1, 1, math.nan)]
    samples.write_text("\n".join(lines) + "\n")
    alertd = None
    try:
        alertd = Alertd(rules, state)
        wait_for(lambda: len(receiver.recorder.bodies) >= 1, "the other group's notification", alertd=alertd)
        refused_at = time.monotonic()
        wait_for(lambda: len(receiver.recorder.bodies) >= 2, "the refused notification, retried", 15, alertd)
        waited = receiver.recorder.arrivals[1] - refused_at
        assert alertd.stop() == 0
    finally:
        if alertd is not None:
            alertd.stop(signal.SIGKILL)
        receiver.stop()
    assert receiver.recorder.received[0][1] == 429
    runs = [b["groupLabels"] for b in receiver.recorder.bodies]
    assert sorted(json.dumps(r) for r in runs) == [json.dumps({"run": "a"}), json.dumps({"run": "b"})]
    assert waited < 5.0  # the 2 s cap, not the year the receiver asked for
    assert "retry in 2.0s" in alertd.logs()
