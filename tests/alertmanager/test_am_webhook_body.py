"""alertd's generic webhook body against the body a real Alertmanager posts for the same alerts."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from am_testkit import Recorder, running_alertmanager

from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.formats import Options
from alertd.notify.formats.generic import build

EXTERNAL = "http://alertd.example:9099/"
GROUP_WAIT = 5
"""Alertmanager flushes a new group at once when its first alert started more than group_wait ago (dispatch.go,
aggrGroup.insert): the alerts of one POST would race that flush. So the alerts start `AGO` seconds before the POST,
well inside group_wait, and every alert of the POST is in the group when it flushes."""
AGO = 2
CONFIG = """\
route:
  receiver: rec
  group_by: [alertname]
  group_wait: {group_wait}s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: rec
    webhook_configs:
      - url: {webhook}/hook
        max_alerts: {max_alerts}
"""


def transition(start: float, **labels: str) -> Transition:
    return Transition(
        rule="loss_nan",
        state=TransitionKind.FIRING,
        time=start + 30,
        step=100,
        value=float("nan"),
        labels=make_labels(labels),
        severity="critical",
        annotations=(("runbook", "https://wiki/nan"), ("summary", f"NaN in {labels['run']}")),
        active_at=start,
    )


def notification(alerts: list[Transition]) -> Notification:
    return Notification(
        receiver="rec",
        group_key='{}:{alertname="loss_nan"}',
        group_labels=(("alertname", "loss_nan"),),
        status="firing",
        alerts=tuple(alerts),
        key="k",
        created=0.0,
    )


def alertmanagers_body(
    tmp_path: Path,
    recorder: Recorder,
    make: Callable[[float], list[Transition]],
    max_alerts: int,
    keys: tuple[str, ...] = (),
) -> tuple[Any, list[Transition]]:
    """What Alertmanager posts for the alerts `make(start)` builds, once it runs, and those alerts."""
    config = CONFIG.format(webhook=recorder.url, max_alerts=max_alerts, group_wait=GROUP_WAIT)
    with running_alertmanager(tmp_path, recorder, config, f"--web.external-url={EXTERNAL}") as am:
        alerts = make(float(int(time.time()) - AGO))
        everything = build(notification(alerts), Options(external_url=EXTERNAL))["alerts"]
        fields = ("labels", "annotations", "startsAt", "generatorURL", *keys)
        posted = [{k: a[k] for k in fields if not (k == "endsAt" and a["status"] == "firing")} for a in everything]
        httpx.post(f"{am.url}/api/v2/alerts", json=posted, timeout=5).raise_for_status()
        got = recorder.wait_for(1, timeout=3 * GROUP_WAIT)
    assert got, "Alertmanager sent nothing"
    return got[0][1], alerts


def test_the_body_equals_alertmanagers_field_for_field_after_truncation(tmp_path: Path, recorder: Recorder) -> None:

    def make(start: float) -> list[Transition]:
        return [
            transition(start, run="exp2", job="train", team="ml", source="tb", note='läuft "gut" ✓ \\ ,{}'),
            transition(start, run="exp0", team="cv", source="tb"),  # no job: Alertmanager puts it last
            transition(start, run="exp1", job="train", team="ml", source="tb"),
        ]

    theirs, alerts = alertmanagers_body(tmp_path, recorder, make, max_alerts=2)
    ours = build(notification(alerts), Options(external_url=EXTERNAL, max_alerts=2))

    assert ours == theirs  # every field: order, fingerprints, truncatedAlerts, common labels of the alerts sent
    assert ours["truncatedAlerts"] == 1
    assert [a["labels"]["run"] for a in ours["alerts"]] == ["exp1", "exp2"]
    assert ours["commonLabels"]["team"] == "ml"  # taken after truncation: exp0 (team=cv) was cut
    assert [a["fingerprint"] for a in ours["alerts"]] == [alerts[2].fingerprint, alerts[0].fingerprint]


def test_status_is_that_of_the_alerts_sent(tmp_path: Path, recorder: Recorder) -> None:
    """Two resolved alerts come first in Alertmanager's order; the firing one is cut by max_alerts: 2, so
    the message says `resolved`, as Alertmanager's does."""

    def make(start: float) -> list[Transition]:
        resolved = [  # ended a second after they started: before the POST, so resolved when Alertmanager gets them
            replace(transition(start, run=run, job="a", source="tb"), state=TransitionKind.RESOLVED, time=start + 1)
            for run in ("exp1", "exp2")
        ]
        return [transition(start, run="exp3", job="b", source="tb"), *resolved]

    theirs, alerts = alertmanagers_body(tmp_path, recorder, make, max_alerts=2, keys=("endsAt",))
    ours = build(notification(alerts), Options(external_url=EXTERNAL, max_alerts=2))
    assert ours == theirs
    assert ours["status"] == "resolved" and ours["truncatedAlerts"] == 1
