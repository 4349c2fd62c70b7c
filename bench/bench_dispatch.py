"""Dispatcher figures: planning cost per tick, outbox write rate, delivery-pipeline overhead.

Run: PYTHONPATH=src python bench/bench_dispatch.py
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.plan import Plan, PlanState, plan
from alertd.dispatch.route_config import RouteConfig
from alertd.model import Alert, AlertState, Notification, Transition, TransitionKind, make_labels

RUNS, RULES = 1000, 10
ROUTE = RouteConfig.model_validate(
    {"receivers": ["log"], "routes": [{"match": {"severity": "critical"}, "receivers": ["chat"]}]}
).to_route()


def _alerts(now: float) -> tuple[list[Transition], dict[str, Alert]]:
    fired, alerts = [], {}
    for run in range(RUNS):
        for rule in range(RULES):
            labels = make_labels({"metric": "train/loss", "run": f"run{run}", "source": "tb"})
            sev = "critical" if rule == 0 else "warning"
            t = Transition(f"rule{rule}", TransitionKind.FIRING, now, 1, 1.0, labels, sev, active_at=now)
            fired.append(t)
            alerts[t.fingerprint] = Alert(t.rule, AlertState.FIRING, labels, sev, 1.0, 1, now, now, now)
    return fired, alerts


class _Null:
    name = "null"

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, notification: Notification) -> None:
        self.sent += 1

    async def aclose(self) -> None:
        pass


def _timed(call: Callable[[], Plan], times: int = 5) -> tuple[Plan, float]:
    """`call`'s result and its median seconds over `times` calls (`plan` is pure: each call plans the same)."""
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        out = call()
        took.append(time.perf_counter() - t0)
    return out, statistics.median(took)


def bench_plan() -> None:
    fired, alerts = _alerts(0.0)
    first, t_first = _timed(lambda: plan(PlanState(), transitions=fired, alerts=alerts, route=ROUTE, now=0.0))
    tick, t_tick = _timed(lambda: plan(first.state, transitions=[], alerts=alerts, route=ROUTE, now=30.0))
    flush, t_flush = _timed(lambda: plan(tick.state, transitions=[], alerts=alerts, route=ROUTE, now=60.0))
    n = len(alerts)
    sent = len(first.notifications)
    print(f"plan: {n} new firing alerts -> {sent} notifications in {t_first * 1e3:.1f} ms (median of 5)")
    print(f"plan: idle tick over {n} firing alerts, no group due: {t_tick * 1e3:.1f} ms (median of 5)")
    print(f"plan: {len(flush.state.groups)} groups flushed, nothing to send: {t_flush * 1e3:.1f} ms (median of 5)")


def bench_outbox_and_delivery() -> None:
    fired, alerts = _alerts(0.0)
    with tempfile.TemporaryDirectory() as tmp:
        null = _Null()
        d = Dispatcher(route=ROUTE, outbox=Outbox(Path(tmp)), notifiers={"log": null, "chat": null})
        t0 = time.perf_counter()
        result = d.submit(fired, alerts, 0.0)
        t1 = time.perf_counter()
        asyncio.run(d.deliver_due(0.0))
        t2 = time.perf_counter()
        n = len(result.notifications)
        print(f"outbox: plan + write {n} notifications in {(t1 - t0) * 1e3:.0f} ms ({n / (t1 - t0):.0f}/s)")
        print(
            f"delivery: {null.sent} notifications through outbox bookkeeping (null notifier) in "
            f"{(t2 - t1) * 1e3:.0f} ms ({null.sent / (t2 - t1):.0f}/s)"
        )
        d.outbox.close()


if __name__ == "__main__":
    bench_plan()
    bench_outbox_and_delivery()
