"""The service's delivery loop (`alertd.service.delivery.Deliveries.loop`) against a real receiver on 127.0.0.1:
a notification due in the outbox is sent without a plan of its own; a group timer that expires is planned."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.model import Alert
from alertd.service.delivery import Deliveries

from .helpers import FIRING, RESOLVED, Table, route, tr
from .receiver import HttpTestNotifier, Receiver


class Engine:
    """The engine's side the loop sees: its alerts, counted each time the loop asks for them (what a plan costs
    with thousands firing), and the clock."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.now = 0.0
        self.asked: list[float] = []

    def alerts(self) -> dict[str, Alert]:
        self.asked.append(self.now)
        return dict(self.table.alerts)


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(deliveries: Deliveries) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(deliveries.loop(stop))
    try:
        yield
    finally:
        stop.set()
        deliveries.wake()
        await asyncio.wait_for(task, 5)


@pytest.mark.anyio
async def test_a_due_notification_is_sent_without_a_plan_and_a_group_timer_is_planned(
    tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier
) -> None:
    spec = {"receivers": ["hook"], "group_by": ["run"], "group_wait": "0s", "group_interval": "5m"}
    table = Table(route(spec))
    engine = Engine(table)
    deliveries = Deliveries(engine.alerts, lambda: engine.now)
    outbox = Outbox(tmp_path)
    try:
        dispatcher = deliveries.dispatcher = Dispatcher(route=route(spec), outbox=outbox, notifiers={"hook": hook})
        fired = [tr("loss_not_finite", FIRING, 0.0, run=f"run{i}", severity="critical") for i in range(3)]
        table.step(0.0, *fired)
        plan = dispatcher.submit(fired, table.alerts, 0.0)  # as the service does after the evaluation
        assert len(plan.notifications) == 3
        async with running(deliveries):
            deliveries.wake()
            await until(lambda: {r.status for r in outbox.rows()} == {"delivered"}, "the three firing notifications")
            assert len(receiver.recorder.delivered()) == 3
            # the outbox had the notifications due, no group timer was: nothing was planned again for them
            assert engine.asked == []

            # run1's loss is finite again: its group tells it at its group_interval, a timer the loop plans
            back = tr("loss_not_finite", RESOLVED, 10.0, run="run1", severity="critical")
            table.step(10.0, back)
            engine.now = 10.0
            later = dispatcher.submit([back], table.alerts, 10.0)
            assert later.notifications == () and dispatcher.due(300.0) and not dispatcher.due(299.0)
            engine.now = 300.0
            deliveries.wake()
            await until(lambda: len(receiver.recorder.delivered()) == 4, "the resolution at the group's timer")
            assert engine.asked == [300.0]  # planned once, at the timer
            last = receiver.recorder.bodies[-1]
            assert (last["status"], last["group_labels"], last["created"]) == ("resolved", [["run", "run1"]], 300.0)
    finally:
        outbox.close()
