"""Test helpers: transitions as the engine emits them, and a planner driven as a time table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from alertd.dispatch.matchers import Silence
from alertd.dispatch.plan import Plan, PlanState, plan
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig
from alertd.dispatch.routes import InhibitRule, Route
from alertd.model import Alert, AlertState, Notification, Transition, TransitionKind, make_labels

FIRING = TransitionKind.FIRING
RESOLVED = TransitionKind.RESOLVED
PENDING = TransitionKind.PENDING
INACTIVE = TransitionKind.INACTIVE


def tr(
    rule: str,
    state: TransitionKind,
    time: float,
    *,
    run: str = "r1",
    severity: str = "warning",
    metric: str = "train/loss",
    value: float = float("nan"),
    notify: tuple[str, ...] = (),
    **labels: str,
) -> Transition:
    """A transition of `rule` on one series of run `run`."""
    return Transition(
        rule=rule,
        state=state,
        time=time,
        step=int(time),
        value=value,
        labels=make_labels({"metric": metric, "run": run, "source": "tb", **labels}),
        severity=severity,
        annotations=(("summary", f"{rule} in {run}"),),
        active_at=time,
        notify=notify,
    )


def route(spec: dict[str, Any]) -> Route:
    """A route tree from its rules-file form."""
    return RouteConfig.model_validate(spec).to_route()


def inhibit(spec: dict[str, Any]) -> InhibitRule:
    """An inhibition rule from its rules-file form."""
    return InhibitRuleConfig.model_validate(spec).to_rule()


def describe(n: Notification) -> tuple[str, str, tuple[str, ...]]:
    """(receiver, status, sorted `rule/run:state` of each alert): what a user reads in the message."""
    items = sorted(f"{t.rule}/{dict(t.labels).get('run')}:{t.state.value}" for t in n.alerts)
    return n.receiver, n.status, tuple(items)


@dataclass
class Table:
    """Drives `plan` as the engine would: current alerts follow the transitions fed in."""

    root: Route
    inhibit_rules: Sequence[InhibitRule] = ()
    silences: list[Silence] = field(default_factory=list)
    state: PlanState = field(default_factory=PlanState)
    alerts: dict[str, Alert] = field(default_factory=dict)
    last: Plan | None = None
    immediate: frozenset[str] = frozenset()
    max_notifications: int = 0

    def step(self, now: float, *transitions: Transition) -> list[tuple[str, str, tuple[str, ...]]]:
        """Feed the transitions at `now`; return the notifications planned, described."""
        for t in transitions:
            if t.state in (FIRING, PENDING):
                self.alerts[t.fingerprint] = Alert(
                    rule=t.rule,
                    state=AlertState.FIRING if t.state is FIRING else AlertState.PENDING,
                    labels=t.labels,
                    severity=t.severity,
                    value=t.value,
                    step=t.step,
                    time=t.time,
                    active_at=t.active_at or t.time,
                    fired_at=t.time if t.state is FIRING else None,
                    annotations=t.annotations,
                )
            else:
                self.alerts.pop(t.fingerprint, None)
        self.last = plan(
            self.state,
            transitions=list(transitions),
            alerts=dict(self.alerts),
            route=self.root,
            inhibit_rules=self.inhibit_rules,
            silences=self.silences,
            now=now,
            immediate=self.immediate,
            max_notifications=self.max_notifications,
        )
        self.state = self.last.state
        return sorted(describe(n) for n in self.last.notifications)

    def run(self, rows: Sequence[tuple[float, Sequence[Transition], list[Any]]]) -> None:
        """Check a time table: at each `now`, feed the transitions, expect exactly these notifications."""
        for now, fed, expected in rows:
            got = self.step(now, *fed)
            assert got == sorted(expected), f"at t={now}: got {got}, expected {sorted(expected)}"
