"""AlertmanagerNotifier against a real Prometheus Alertmanager (Debian's prometheus-alertmanager)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from am_testkit import GROUP_INTERVAL, Alertmanager, Recorder, free_port

from alertd.clock import FakeClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.alertmanager import AlertmanagerNotifier
from alertd.notify.config import AlertmanagerConfig

LABELS = {"metric": "train/loss", "run": "exp1", "source": "tb", "gpu.uuid": "GPU-1234"}


def transition(
    state: TransitionKind, t: float, *, rule: str = "loss_not_finite", active_at: float | None = None
) -> Transition:
    return Transition(
        rule=rule,
        state=state,
        time=t,
        step=250,
        value=float("nan"),
        labels=make_labels(LABELS),
        severity="critical",
        annotations=(("summary", "train/loss is NaN at step 250 in exp1"),),
        active_at=active_at if active_at is not None else t - 10,
    )


def notification(*alerts: Transition) -> Notification:
    status = "firing" if any(a.state is TransitionKind.FIRING for a in alerts) else "resolved"
    return Notification("am", "g", (("rule", alerts[0].rule),), status, alerts, f"k-{status}", alerts[0].time)


def config(url: str, **kw: Any) -> AlertmanagerConfig:
    return AlertmanagerConfig.model_validate({"type": "alertmanager", "url": url, "timeout": "2s", **kw})


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def webhook_alerts(rec: Recorder) -> list[tuple[str, dict[str, Any]]]:
    """(notification status, alert) for every alert in every webhook notification received so far."""
    return [(body["status"], a) for path, body in rec.requests if path == "/hook" for a in body["alerts"]]


@pytest.mark.anyio
async def test_firing_alert_appears_active_with_labels_and_annotations(alertmanager: Alertmanager) -> None:
    now = time.time()
    notifier = AlertmanagerNotifier("am", config(alertmanager.url, generator_url="http://node-a:9099/"))
    pending = transition(TransitionKind.PENDING, now - 5, rule="other_rule")
    await notifier.send(notification(transition(TransitionKind.FIRING, now), pending))
    await notifier.aclose()

    [alert] = alertmanager.alerts()
    assert alert["labels"] == {
        "alertname": "loss_not_finite",
        "severity": "critical",
        "metric": "train/loss",
        "run": "exp1",
        "source": "tb",
        "gpu_uuid": "GPU-1234",
    }
    assert alert["annotations"] == {
        "summary": "train/loss is NaN at step 250 in exp1",
        "value": "NaN",
        "step": "250",
    }
    assert alert["status"]["state"] == "active"
    assert alert["generatorURL"] == "http://node-a:9099/"
    assert ts(alert["startsAt"]) == pytest.approx(now - 10, abs=0.01)
    assert ts(alert["endsAt"]) == pytest.approx(now + 4 * 60, abs=5)

    alertmanager.webhook.wait_for(1, timeout=5)
    [(status, hooked)] = webhook_alerts(alertmanager.webhook)
    assert status == "firing"
    assert hooked["labels"]["alertname"] == "loss_not_finite"
    assert hooked["fingerprint"] == alert["fingerprint"]


@pytest.mark.anyio
async def test_resolved_alert_leaves_active_and_is_notified_resolved(alertmanager: Alertmanager) -> None:
    now = time.time()
    notifier = AlertmanagerNotifier("am", config(alertmanager.url))
    await notifier.send(notification(transition(TransitionKind.FIRING, now - 1)))
    assert len(alertmanager.alerts()) == 1
    alertmanager.webhook.wait_for(1, timeout=5)

    await notifier.send(notification(transition(TransitionKind.RESOLVED, time.time(), active_at=now - 11)))
    assert alertmanager.alerts() == []
    assert notifier.firing == frozenset()
    assert await notifier.resend(time.time()) == 0
    await notifier.aclose()

    alertmanager.webhook.wait_for(2, timeout=5 * GROUP_INTERVAL)
    got = webhook_alerts(alertmanager.webhook)
    assert [s for s, _ in got] == ["firing", "resolved"]
    resolved = got[1][1]
    assert resolved["status"] == "resolved"
    assert ts(resolved["endsAt"]) <= time.time()
    assert ts(resolved["startsAt"]) == pytest.approx(now - 11, abs=0.01)


@pytest.mark.anyio
async def test_resend_keeps_firing_alerts_alive_and_the_others_expire(alertmanager: Alertmanager) -> None:
    # endsAt = now + 4 x 0.5 s: without a resend, Alertmanager resolves an alert by itself after 2 s.
    cfg = config(alertmanager.url, resend_interval="500ms")
    notifier, crashed = AlertmanagerNotifier("am", cfg), AlertmanagerNotifier("am", cfg)
    now = time.time()
    await notifier.send(notification(transition(TransitionKind.FIRING, now, rule="kept")))
    await notifier.send(notification(transition(TransitionKind.FIRING, now, rule="dropped")))
    await notifier.send(notification(transition(TransitionKind.RESOLVED, now, rule="dropped")))
    await crashed.send(notification(transition(TransitionKind.FIRING, now, rule="orphan")))
    await crashed.aclose()  # this node dies: nobody re-sends "orphan"
    assert {a["labels"]["alertname"] for a in alertmanager.alerts()} == {"kept", "orphan"}

    posted = []
    deadline = time.time() + 3.0
    while time.time() < deadline:
        posted.append(await notifier.resend(time.time()))
        await asyncio.sleep(0.5)
    await notifier.aclose()

    assert set(posted) == {1}
    [alert] = alertmanager.alerts()
    assert alert["labels"]["alertname"] == "kept"
    assert ts(alert["endsAt"]) > time.time()


@pytest.mark.anyio
async def test_what_is_posted_and_when(recorder: Recorder) -> None:
    # A recording server stands in for Alertmanager to show each body exactly; the clock is a fake one.
    t0 = 1_780_000_000.0
    clock = FakeClock(t0)
    notifier = AlertmanagerNotifier("am", config(recorder.url, resend_interval="1m"), clock=clock)
    firing = transition(TransitionKind.FIRING, t0, active_at=t0 - 30)

    await notifier.send(notification(transition(TransitionKind.PENDING, t0 - 30)))
    assert recorder.requests == []  # pending alerts are not Alertmanager's business
    await notifier.send(notification(firing))
    clock.advance(90)  # a retry of the same transition, delivered late: endsAt counts from now
    await notifier.send(notification(firing))
    assert await notifier.resend(t0 + 120) == 1
    await notifier.send(notification(transition(TransitionKind.RESOLVED, t0 + 150, active_at=None)))
    await notifier.send(notification(firing))  # an old firing retried after the resolution: ignored
    assert await notifier.resend(t0 + 180) == 0
    await notifier.aclose()

    bodies = [body for _, body in recorder.requests]
    assert [len(b) for b in bodies] == [1, 1, 1, 1]
    assert [(b[0]["startsAt"], b[0]["endsAt"]) for b in bodies] == [
        ("2026-05-28T20:26:10Z", "2026-05-28T20:30:40Z"),  # t0 - 30, t0 + 4 x 60
        ("2026-05-28T20:26:10Z", "2026-05-28T20:32:10Z"),  # t0 + 90 + 240
        ("2026-05-28T20:26:10Z", "2026-05-28T20:32:40Z"),  # resend at t0 + 120
        ("2026-05-28T20:26:10Z", "2026-05-28T20:29:10Z"),  # resolved at t0 + 150, same start
    ]
    assert all(b[0]["labels"]["alertname"] == "loss_not_finite" for b in bodies)
    assert "generatorURL" not in bodies[0][0]


@pytest.mark.anyio
async def test_a_resend_in_flight_does_not_overtake_a_resolution(recorder: Recorder) -> None:
    now = time.time()
    notifier = AlertmanagerNotifier("am", config(recorder.url))
    await notifier.send(notification(transition(TransitionKind.FIRING, now)))
    recorder.delay_first = 0.3
    resolved = notification(transition(TransitionKind.RESOLVED, now + 1))
    await asyncio.gather(notifier.resend(now + 1), notifier.send(resolved))
    await notifier.aclose()
    ends = [ts(body[0]["endsAt"]) for _, body in recorder.requests]
    assert len(ends) == 3
    assert ends[-1] == pytest.approx(now + 1, abs=0.002)  # Alertmanager hears the resolution last


@pytest.mark.anyio
async def test_two_nodes_make_one_alert_and_one_notification(alertmanager: Alertmanager) -> None:
    now = time.time()
    node_a = AlertmanagerNotifier("am", config(alertmanager.url))
    node_b = AlertmanagerNotifier("am", config(alertmanager.url))
    await node_a.send(notification(transition(TransitionKind.FIRING, now)))
    alertmanager.webhook.wait_for(1, timeout=5)
    # Node B sees the same run a moment later (its own sample time and value annotation).
    await node_b.send(notification(transition(TransitionKind.FIRING, now + 0.7)))
    assert await node_a.resend(time.time()) == 1
    assert await node_b.resend(time.time()) == 1
    await asyncio.sleep(2.5 * GROUP_INTERVAL)  # two group intervals: time for a second notification
    await node_a.aclose()
    await node_b.aclose()

    assert len(alertmanager.alerts()) == 1
    assert len(webhook_alerts(alertmanager.webhook)) == 1
    assert len(alertmanager.webhook.requests) == 1


@pytest.mark.anyio
async def test_alertmanager_down_is_recoverable_and_hides_credentials() -> None:
    port = free_port()
    notifier = AlertmanagerNotifier("am", config(f"http://user:tok3n@127.0.0.1:{port}"))
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(transition(TransitionKind.FIRING, time.time())))
    await notifier.aclose()
    assert err.value.recoverable
    assert f"http://127.0.0.1:{port}" in str(err.value)
    assert "tok3n" not in str(err.value)
    # The alert stays in the firing set, so the next resend posts it once Alertmanager is back.
    assert len(notifier.firing) == 1


@pytest.mark.anyio
async def test_wrong_path_prefix_is_not_recoverable_with_alertmanagers_text(
    alertmanager: Alertmanager,
) -> None:
    notifier = AlertmanagerNotifier("am", config(alertmanager.url + "/wrong-prefix"))
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(transition(TransitionKind.FIRING, time.time())))
    await notifier.aclose()
    assert not err.value.recoverable
    assert str(err.value).endswith("answered 404: 404 page not found")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "headers", "recoverable", "retry_after"),
    [(503, {}, True, None), (429, {"Retry-After": "7"}, True, 7.0), (400, {}, False, None)],
)
async def test_error_answers(
    recorder: Recorder, status: int, headers: dict[str, str], recoverable: bool, retry_after: float | None
) -> None:
    recorder.status, recorder.reply, recorder.headers = status, '"invalid label set"', headers
    notifier = AlertmanagerNotifier("am", config(recorder.url))
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(transition(TransitionKind.FIRING, time.time())))
    await notifier.aclose()
    assert err.value.recoverable is recoverable
    assert err.value.retry_after == retry_after
    assert str(err.value) == f"alertmanager notifier 'am' ({recorder.url}) answered {status}: invalid label set"
