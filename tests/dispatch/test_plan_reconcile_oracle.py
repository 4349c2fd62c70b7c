"""The planner's per-plan passes over every group and firing alert (`_reconcile`, the inhibit rules' sources)
against the implementations they replaced (the oracle, kept here): the same groups and the same label maps, on
random groups held by the planner and random engine alerts (alerts that vanished without a transition, firing
alerts no group holds: a restart)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.dispatch.matchers import alert_label_map
from alertd.dispatch.plan import FiringSources, Group, _insert, _reconcile, _resolved_now, transition_of
from alertd.dispatch.routes import Route
from alertd.model import Alert, AlertState, Transition, TransitionKind

from .helpers import FIRING, RESOLVED, Table, route, tr

ROOT = route(
    {"receivers": ["chat"], "group_by": ["run"], "routes": [{"match": {"severity": "critical"}, "receivers": ["page"]}]}
)
RULES = ["nan", "spike", "slow"]
RUNS = ["r1", "r2", "r3", "r4"]


def old_reconcile(groups: dict[str, Group], alerts: Mapping[str, Alert], root: Route, now: float) -> None:
    """`_reconcile` before it made one pass over every group's alerts (the oracle)."""
    firing = {fp: a for fp, a in alerts.items() if a.state is AlertState.FIRING}
    held: set[str] = set()
    for key, group in list(groups.items()):
        gone = {
            fp: _resolved_now(t, now)
            for fp, t in group.alerts.items()
            if t.state is TransitionKind.FIRING and fp not in firing
        }
        if gone:
            groups[key] = replace(group, alerts={**group.alerts, **gone})
        held.update(fp for fp, t in group.alerts.items() if t.state is TransitionKind.FIRING)
    _insert(groups, (transition_of(a) for fp, a in firing.items() if fp not in held), root, now)


def old_sources(groups: Mapping[str, Group], alerts: Mapping[str, Alert] | None) -> dict[str, dict[str, str]]:
    """The inhibit rules' sources as every plan made them before they were made at the first look (the oracle)."""
    if alerts is not None:
        return {
            fp: alert_label_map(a.rule, a.labels, a.severity)
            for fp, a in alerts.items()
            if a.state is AlertState.FIRING
        }
    return {
        fp: alert_label_map(t.rule, t.labels, t.severity)
        for g in groups.values()
        for fp, t in g.alerts.items()
        if t.state is TransitionKind.FIRING
    }


step = st.tuples(
    st.sampled_from(RULES),
    st.sampled_from(RUNS),
    st.sampled_from([FIRING, RESOLVED]),
    st.sampled_from(["warning", "critical"]),
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.lists(step, max_size=4), min_size=1, max_size=6),
    vanish=st.sets(st.sampled_from([(r, run) for r in RULES for run in RUNS])),
    appear=st.sets(st.sampled_from([(r, run) for r in RULES for run in RUNS])),
)
def test_reconcile_and_sources_equal_the_old_ones(
    steps: list[list[tuple[str, str, TransitionKind, str]]], vanish: set[tuple[str, str]], appear: set[tuple[str, str]]
) -> None:
    table = Table(ROOT)
    for i, fed in enumerate(steps):  # the planner's groups, as a run of plans leaves them (group_wait: none flushed)
        table.step(float(i), *(tr(rule, state, float(i), run=run, severity=sev) for rule, run, state, sev in fed))
    alerts = {fp: a for fp, a in table.alerts.items() if (a.rule, dict(a.labels)["run"]) not in vanish}
    for rule, run in appear:  # firing in the engine, unknown to the planner (as after a restart)
        t = tr(rule, FIRING, 50.0, run=run, metric="eval/loss")
        alerts.setdefault(t.fingerprint, _alert(t))
    new, old = dict(table.state.groups), dict(table.state.groups)
    _reconcile(new, alerts, ROOT, 60.0)
    old_reconcile(old, alerts, ROOT, 60.0)
    assert list(new) == list(old)
    assert all(new[k].alerts == old[k].alerts and new[k].next_flush == old[k].next_flush for k in new)
    for given_alerts in (alerts, None):
        assert dict(FiringSources(new, given_alerts).items()) == old_sources(old, given_alerts)
        assert dict(FiringSources(new, given_alerts)) == old_sources(old, given_alerts)


def _alert(t: Transition) -> Alert:
    """The engine's alert of a firing transition."""
    table = Table(ROOT)
    table.step(t.time, t)
    return table.alerts[t.fingerprint]
