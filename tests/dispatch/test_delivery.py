"""Delivery to a real HTTP receiver on 127.0.0.1: outages, Retry-After, rate limits, errors, restarts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.pipeline import Backoff
from alertd.model import Transition

from .helpers import FIRING, RESOLVED, Table, route, tr
from .receiver import HttpTestNotifier, Receiver, free_port

_OPENED: list[Outbox] = []


@pytest.fixture(autouse=True)
def _close_outboxes() -> Iterator[None]:
    """Every outbox a test opened is closed after it (its database and its directory lock)."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def opened(state: Path) -> Outbox:
    """An outbox in `state`, closed after the test."""
    outbox = Outbox(state)
    _OPENED.append(outbox)
    return outbox


def dispatcher(state: Path, notifier: HttpTestNotifier, seed: int = 1) -> Dispatcher:
    return Dispatcher(
        route=route({"receivers": ["hook"]}),
        outbox=opened(state),
        notifiers={"hook": notifier},
        backoff=Backoff(base=1.0, cap=300.0),
        rng=random.Random(seed),
    )


def nan_alerts(count: int, t: float = 0.0) -> tuple[list[Transition], Table]:
    """The transitions of `count` runs whose loss turned NaN at `t`, and an engine stand-in holding them."""
    fired = [tr("loss_not_finite", FIRING, t, run=f"run{i}", severity="critical") for i in range(count)]
    table = Table(route({"receivers": ["hook"]}))
    table.step(t, *fired)
    return fired, table


async def drain(d: Dispatcher, now: float, until: float) -> float:
    """Run deliver_due at every wakeup from `now` up to `until`; return the last time used."""
    while True:
        await d.deliver_due(now)
        nxt = d.outbox.next_due()
        if nxt is None or nxt > until:
            return now
        now = max(now, nxt)


@pytest.mark.anyio
async def test_receiver_down_then_back_loses_nothing_and_sends_nothing_twice(
    tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier
) -> None:
    d = dispatcher(tmp_path, hook)
    fired, engine = nan_alerts(3)
    receiver.recorder.responses = [(503, {})] * 9  # three attempts each fail
    plan = d.submit(fired, engine.alerts, 0.0)
    keys = {n.key for n in plan.notifications}
    assert len(keys) == 3
    now = await drain(d, 0.0, until=10_000.0)
    assert receiver.recorder.delivered() == dict.fromkeys(keys, 1)
    assert receiver.recorder.requests() == 12
    assert d.counters.retried["hook"] == 9 and d.counters.delivered["hook"] == 3
    assert {r.status for r in d.outbox.rows()} == {"delivered"}
    # the engine keeps reporting the same firing alerts: nothing new is planned, nothing re-sent
    assert d.submit([], engine.alerts, now + 60).notifications == ()
    await d.deliver_due(now + 120)
    assert receiver.recorder.requests() == 12


@pytest.mark.anyio
async def test_connection_refused_is_retried_with_growing_jittered_backoff(tmp_path: Path) -> None:
    port = free_port()
    hook = HttpTestNotifier("hook", f"http://127.0.0.1:{port}/hook")
    d = dispatcher(tmp_path, hook)
    d.submit([tr("nan", FIRING, 0.0)], None, 0.0)
    waits = []
    now = 0.0
    for failures in range(1, 8):
        (out,) = await d.deliver_due(now)
        assert out.result == "retry" and out.next_attempt_at is not None
        assert out.error == "hook: ConnectError"
        waits.append(out.next_attempt_at - now)
        assert 0.0 <= waits[-1] <= min(300.0, 2.0 ** (failures - 1))
        now = out.next_attempt_at
    assert max(waits) > 1.0  # the ceiling grew
    server = Receiver(port)
    try:
        (out,) = await d.deliver_due(now)
        assert out.result == "delivered"
        assert len(server.recorder.delivered()) == 1
    finally:
        server.stop()
        await hook.aclose()


def test_full_jitter_ceiling_doubles_up_to_the_cap() -> None:
    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    b = Backoff(base=1.0, cap=10.0)
    assert [b.delay(n, Top()) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert b.delay(500, Top()) == 10.0


@pytest.mark.anyio
async def test_retry_after_is_honoured(tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier) -> None:
    d = dispatcher(tmp_path, hook)
    receiver.recorder.responses = [(429, {"Retry-After": "120"})]
    d.submit([tr("nan", FIRING, 0.0)], None, 0.0)
    (out,) = await d.deliver_due(0.0)
    assert (out.result, out.next_attempt_at) == ("retry", 120.0)
    assert await d.deliver_due(119.0) == []
    assert receiver.recorder.requests() == 1
    assert d.outbox.next_due() == 120.0
    assert d.next_wakeup() == 60.0  # the group's own timer comes first
    (out,) = await d.deliver_due(120.0)
    assert out.result == "delivered"
    assert receiver.recorder.requests() == 2


@pytest.mark.anyio
async def test_rate_limit_delays_the_21st_notification(tmp_path: Path, receiver: Receiver) -> None:
    hook = HttpTestNotifier("hook", receiver.url, rate_limit=(20, 60.0))
    d = dispatcher(tmp_path, hook)
    try:
        fired, engine = nan_alerts(21)
        d.submit(fired, engine.alerts, 0.0)
        outs = await d.deliver_due(0.0)
        assert [o.result for o in outs].count("delivered") == 20
        (late,) = [o for o in outs if o.result == "deferred"]
        assert late.next_attempt_at == 60.0
        assert await d.deliver_due(59.9) == []
        (out,) = await d.deliver_due(60.0)
        assert out.key == late.key and out.result == "delivered"
        assert len(receiver.recorder.delivered()) == 21
        assert receiver.recorder.requests() == 21
    finally:
        await hook.aclose()


@pytest.mark.anyio
async def test_non_recoverable_error_is_not_retried(tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier) -> None:
    d = dispatcher(tmp_path, hook)
    receiver.recorder.responses = [(400, {})]
    d.submit([tr("nan", FIRING, 0.0)], None, 0.0)
    (out,) = await d.deliver_due(0.0)
    assert (out.result, out.error) == ("failed", "hook: HTTP 400")
    assert await d.deliver_due(1000.0) == []
    assert receiver.recorder.requests() == 1
    (row,) = d.outbox.rows()
    assert (row.status, row.attempts, row.last_error) == ("failed", 1, "hook: HTTP 400")
    assert d.counters.snapshot()["failed"] == {"hook": 1}
    assert d.outbox.next_due() is None


@pytest.mark.anyio
async def test_unknown_receiver_is_a_failure_not_a_loop(tmp_path: Path, hook: HttpTestNotifier) -> None:
    d = Dispatcher(route=route({"receivers": ["gone"]}), outbox=opened(tmp_path), notifiers={"hook": hook})
    d.submit([tr("nan", FIRING, 0.0)], None, 0.0)
    (out,) = await d.deliver_due(0.0)
    assert out.result == "failed" and out.error is not None and "'gone'" in out.error


@pytest.mark.anyio
async def test_restart_resumes_pending_and_remembers_what_was_sent(
    tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier
) -> None:
    d = dispatcher(tmp_path, hook)
    fired, engine = nan_alerts(2)
    receiver.recorder.responses = [(200, {}), (503, {})]
    d.submit(fired, engine.alerts, 0.0)
    outs = await d.deliver_due(0.0)
    assert sorted(o.result for o in outs) == ["delivered", "retry"]
    d.outbox.close()

    again = dispatcher(tmp_path, hook)  # alertd restarted: fresh planner, same state directory
    assert again.submit([], engine.alerts, 10.0).notifications == ()
    await drain(again, 10.0, until=10_000.0)
    assert sorted(receiver.recorder.delivered().values()) == [1, 1]
    # the resolution after the restart is still planned: the log remembered the firing notification
    resolved = tr("loss_not_finite", RESOLVED, 5_000.0, run="run0", severity="critical")
    engine.step(5_000.0, resolved)
    plan = again.submit([resolved], engine.alerts, 5_000.0)
    assert [n.status for n in plan.notifications] == ["resolved"]
    await again.deliver_due(5_000.0)
    assert len(receiver.recorder.delivered()) == 3
    assert receiver.recorder.bodies[-1]["status"] == "resolved"


@pytest.mark.anyio
async def test_resolution_is_not_delivered_before_the_firing_notification_it_follows(
    tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier
) -> None:
    d = dispatcher(tmp_path, hook)
    receiver.recorder.responses = [(429, {"Retry-After": "100"})]
    d.submit([tr("nan", FIRING, 0.0)], None, 0.0)
    await d.deliver_due(0.0)
    d.submit([tr("nan", RESOLVED, 30.0)], None, 30.0)
    assert d.submit([], None, 60.0).notifications[0].status == "resolved"
    assert await d.deliver_due(60.0) == []  # the firing one waits for its Retry-After; the resolution waits too
    outs = await d.deliver_due(100.0)
    assert [o.result for o in outs] == ["delivered", "delivered"]
    assert [b["status"] for b in receiver.recorder.bodies] == ["firing", "resolved"]
