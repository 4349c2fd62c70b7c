"""alertd's generic webhook body against the body a real Alertmanager posts for the same alerts."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from am_testkit import Recorder, running_alertmanager

from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.formats import Options
from alertd.notify.formats.generic import build

EXTERNAL = "http://alertd.example:9099/"
CONFIG = """\
route:
  receiver: rec
  group_by: [alertname]
  group_wait: 2s     # every alert of the one POST in the group before it flushes, even on a loaded machine
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
    tmp_path: Path, recorder: Recorder, alerts: list[dict[str, Any]], max_alerts: int, keys: tuple[str, ...] = ()
) -> Any:
    config = CONFIG.format(webhook=recorder.url, max_alerts=max_alerts)
    with running_alertmanager(tmp_path, recorder, config, f"--web.external-url={EXTERNAL}") as am:
        fields = ("labels", "annotations", "startsAt", "generatorURL", *keys)
        posted = [{k: a[k] for k in fields if not (k == "endsAt" and a["status"] == "firing")} for a in alerts]
        httpx.post(f"{am.url}/api/v2/alerts", json=posted, timeout=5).raise_for_status()
        got = recorder.wait_for(1, timeout=15)
    assert got, "Alertmanager sent nothing"
    return got[0][1]


def test_the_body_equals_alertmanagers_field_for_field_after_truncation(tmp_path: Path, recorder: Recorder) -> None:
    start = float(int(time.time()) - 600)
    alerts = [
        transition(start, run="exp2", job="train", team="ml", source="tb", note='läuft "gut" ✓ \\ ,{}'),
        transition(start, run="exp0", team="cv", source="tb"),  # no job: Alertmanager puts it last
        transition(start, run="exp1", job="train", team="ml", source="tb"),
    ]
    opts = Options(external_url=EXTERNAL)
    everything = build(notification(alerts), opts)
    theirs = alertmanagers_body(tmp_path, recorder, everything["alerts"], max_alerts=2)
    ours = build(notification(alerts), Options(external_url=EXTERNAL, max_alerts=2))

    assert ours == theirs  # every field: order, fingerprints, truncatedAlerts, common labels of the alerts sent
    assert ours["truncatedAlerts"] == 1
    assert [a["labels"]["run"] for a in ours["alerts"]] == ["exp1", "exp2"]
    assert ours["commonLabels"]["team"] == "ml"  # taken after truncation: exp0 (team=cv) was cut
    assert [a["fingerprint"] for a in ours["alerts"]] == [alerts[2].fingerprint, alerts[0].fingerprint]


def test_status_is_that_of_the_alerts_sent(tmp_path: Path, recorder: Recorder) -> None:
    """Two resolved alerts come first in Alertmanager's order; the firing one is cut by max_alerts: 2, so
    the message says `resolved`, as Alertmanager's does."""
    start = float(int(time.time()) - 600)
    resolved = [
        replace(transition(start, run=run, job="a", source="tb"), state=TransitionKind.RESOLVED, time=start + 60)
        for run in ("exp1", "exp2")
    ]
    alerts = [transition(start, run="exp3", job="b", source="tb"), *resolved]
    everything = build(notification(alerts), Options(external_url=EXTERNAL))
    theirs = alertmanagers_body(tmp_path, recorder, everything["alerts"], max_alerts=2, keys=("endsAt",))
    ours = build(notification(alerts), Options(external_url=EXTERNAL, max_alerts=2))
    assert ours == theirs
    assert ours["status"] == "resolved" and ours["truncatedAlerts"] == 1
