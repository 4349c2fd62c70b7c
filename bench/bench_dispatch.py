"""Dispatcher figures: planning cost per tick, the service's alerts for a plan, an open group's JSON, outbox
write rate, delivery-pipeline overhead.

Run: PYTHONPATH=src python bench/bench_dispatch.py
"""

from __future__ import annotations

import asyncio
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from alertd.buffer import SeriesBuffer
from alertd.config import RuleConfig
from alertd.dispatch.codec import GroupTexts, group_to_json
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.plan import Plan, PlanState, plan
from alertd.dispatch.route_config import RouteConfig
from alertd.model import Alert, AlertState, Notification, Sample, SeriesKey, Transition, TransitionKind, make_labels
from alertd.rules import RuleSet, evaluate
from alertd.rules.evaluate import AlertMemo

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


def bench_alerts(firing: int = 10_000, times: int = 5) -> None:
    """The service's alerts for a plan (`Service._alerts`: `EvalState.alerts` with its memo, by fingerprint) with
    `firing` alerts firing: while the same pairs alert, and at an evaluation where one more fired; beside the same
    call without the memo (every alert made and sorted again: what each plan cost before the memo)."""
    rules = RuleSet([RuleConfig.model_validate({"name": "nan", "metric": "loss", "condition": "nonfinite"}).build()])
    keys = [SeriesKey("loss", make_labels({"source": "tb", "run": f"run{i}"})) for i in range(firing + times)]
    buf = SeriesBuffer()
    buf.append([Sample(k, 1.0, 1, math.nan) for k in keys[:firing]])
    state = evaluate(rules, buf, 1.0).state
    memo = AlertMemo()

    def by_fingerprint(m: AlertMemo | None) -> dict[str, Alert]:
        return {a.fingerprint: a for a in state.alerts(rules.rules, m)}

    by_fingerprint(memo)
    same, more, fresh = [], [], []
    for i in range(times):
        t0 = time.perf_counter()
        by_fingerprint(memo)
        same.append(time.perf_counter() - t0)
        buf.append([Sample(keys[firing + i], 2.0 + i, 2 + i, math.nan)], 2.0 + i)
        state = evaluate(rules, buf, 2.0 + i, state).state
        t0 = time.perf_counter()
        got = by_fingerprint(memo)
        more.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert by_fingerprint(None) == got
        fresh.append(time.perf_counter() - t0)
    med = [statistics.median(x) * 1e3 for x in (same, more, fresh)]
    print(
        f"alerts for a plan, {firing} firing: the same ones alerting {med[0]:.1f} ms, one more fired {med[1]:.1f} ms "
        f"(median of {times}); without the service's memo (made and sorted afresh) {med[2]:.1f} ms "
        f"({med[2] / med[1]:.1f}x the one more)"
    )


def bench_group_text(size: int = 10_000, times: int = 5) -> None:
    """The JSON of one open group holding `size` alerts (a storm in one group), written as the outbox does each
    time an alert joins it: from the parts kept for the alerts already in it (`GroupTexts`), beside the whole
    group turned into JSON again (`group_to_json`, as every such write did before)."""
    fired, _ = _alerts(0.0)
    alerts = {t.fingerprint: t for t in fired[: size + times]}
    fps = list(alerts)
    texts = GroupTexts()
    labels = make_labels({"rule": "storm"})
    texts.text("g", "{}", labels, {fp: alerts[fp] for fp in fps[:size]}, 30.0)
    kept, whole = [], []
    for i in range(times):
        group = {fp: alerts[fp] for fp in fps[: size + i + 1]}
        t0 = time.perf_counter()
        text = texts.text("g", "{}", labels, group, 30.0)
        kept.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert group_to_json("{}", labels, group, 30.0) == text
        whole.append(time.perf_counter() - t0)
    a, b = statistics.median(kept) * 1e3, statistics.median(whole) * 1e3
    print(
        f"outbox: a group of {size} alerts written as one more joins it: {a:.1f} ms (median of {times}); "
        f"all of it as JSON again: {b:.1f} ms ({b / a:.0f}x)"
    )


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
    bench_alerts()
    bench_group_text()
    bench_outbox_and_delivery()
