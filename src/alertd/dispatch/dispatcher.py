"""The dispatcher the app uses: plan (pure) + outbox (durable) + delivery (async, retrying).

The app calls `submit(transitions, alerts, now)` after every evaluation, and again (with no transitions)
whenever `next_wakeup()` has passed, then `await deliver_due(now)`. On start the notification log is read
back from the outbox, so a restart neither re-sends what was sent nor forgets it, and everything still
pending in the outbox is delivered by the first `deliver_due`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from alertd.dispatch.outbox import Outbox
from alertd.dispatch.pipeline import Backoff, Delivery, DeliveryCounters, Outcome
from alertd.dispatch.plan import Plan, PlanState, plan
from alertd.dispatch.routes import InhibitRule, Route
from alertd.dispatch.silences import SilenceStore
from alertd.model import Alert, AlertState, Transition, TransitionKind
from alertd.notify.base import Notifier

LOG_RETENTION = 5 * 86400.0
"""How long a notification-log entry of a fully resolved group is kept (Alertmanager's `--data.retention`)."""


class Dispatcher:
    """Routes, groups, dedups and delivers notifications; see the module docstring for the call pattern."""

    def __init__(
        self,
        *,
        route: Route,
        outbox: Outbox,
        notifiers: Mapping[str, Notifier],
        inhibit_rules: Sequence[InhibitRule] = (),
        silences: SilenceStore | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.route = route
        self.inhibit_rules = tuple(inhibit_rules)
        self.silences = silences if silences is not None else SilenceStore()
        self.outbox = outbox
        self.delivery = Delivery(outbox, notifiers, backoff=backoff, rng=rng)
        self._state = PlanState(log=outbox.load_log())
        self._next_plan: float | None = None
        self.last_plan: Plan | None = None

    @property
    def counters(self) -> DeliveryCounters:
        """Delivered / failed / retried / deferred counts per receiver."""
        return self.delivery.counters

    def submit(self, transitions: Sequence[Transition], alerts: Mapping[str, Alert] | None, now: float) -> Plan:
        """Plan what is due at `now` and write it, with the notification log, to the outbox.

        An alert that fired and resolved within these transitions (a NaN followed by finite values in
        one poll) is still notified as firing: the transitions are planned in phases, cut before each
        such resolution, with the alert counted as firing in the earlier phase.
        """
        phases = _phases(transitions)
        for phase in phases[:-1]:
            fired = {t.fingerprint: _alert_of(t) for t in phase if t.state is TransitionKind.FIRING}
            self._plan(phase, fired | dict(alerts or {}), now)
        return self._plan(phases[-1], alerts, now)

    def _plan(self, transitions: Sequence[Transition], alerts: Mapping[str, Alert] | None, now: float) -> Plan:
        result = plan(
            self._state,
            transitions=transitions,
            alerts=alerts,
            route=self.route,
            inhibit_rules=self.inhibit_rules,
            silences=self.silences.active(now),
            now=now,
        )
        self.outbox.commit_plan(result.notifications, result.log_updates)
        self._state = result.state
        self._next_plan = result.next_run
        self.last_plan = result
        return result

    async def deliver_due(self, now: float) -> list[Outcome]:
        """Send everything in the outbox that is due at `now`."""
        return await self.delivery.deliver_due(now)

    def next_wakeup(self) -> float | None:
        """The earliest time `submit` (group timers) or `deliver_due` (retries, rate limits) has work."""
        times = [t for t in (self._next_plan, self.outbox.next_due()) if t is not None]
        return min(times, default=None)

    def reconfigure(
        self,
        *,
        route: Route,
        inhibit_rules: Sequence[InhibitRule] = (),
        notifiers: Mapping[str, Notifier] | None = None,
    ) -> None:
        """Use a reloaded configuration; open groups keep the route they were made with until flushed."""
        self.route = route
        self.inhibit_rules = tuple(inhibit_rules)
        if notifiers is not None:
            self.delivery.notifiers = dict(notifiers)

    def prune(self, now: float) -> None:
        """Forget old log entries of resolved groups and long-expired silences."""
        self.outbox.prune_log(now - LOG_RETENTION)
        log = {k: e for k, e in self._state.log.items() if e.firing or e.sent_at >= now - LOG_RETENTION}
        self._state = PlanState(self._state.groups, log)
        self.silences.prune(now - LOG_RETENTION)


def _phases(transitions: Sequence[Transition]) -> list[list[Transition]]:
    """Cut the transitions before each resolution of an alert that fired earlier in the same list."""
    phases: list[list[Transition]] = [[]]
    fired: set[str] = set()
    for t in transitions:
        if t.state is TransitionKind.RESOLVED and t.fingerprint in fired:
            phases.append([])
            fired = set()
        if t.state is TransitionKind.FIRING:
            fired.add(t.fingerprint)
        phases[-1].append(t)
    return phases


def _alert_of(t: Transition) -> Alert:
    """The firing alert a firing transition stands for."""
    return Alert(
        t.rule,
        AlertState.FIRING,
        t.labels,
        t.severity,
        t.value,
        t.step,
        t.time,
        t.since,
        t.time,
        t.annotations,
        t.notify,
    )
