"""The dispatcher the app uses: plan (pure) + outbox (durable) + delivery (async, retrying).

The app calls `submit(transitions, alerts, now, also=...)` after every evaluation, and again (with no
transitions) whenever a group timer is `due(now)`; it sleeps until `next_wakeup()` (a group timer, or a
notification due in the outbox) and then `await deliver_due(now)`. Each `submit` is one
transaction: the notifications, the notification log, the open groups and whatever `also` writes (the
app's alert states and source cursors). On start the notification log and the open groups are read back
from the outbox, so a restart neither re-sends what was sent nor forgets it (a resolution waiting for
its group's `group_interval` included), and everything still pending in the outbox is delivered by the
first `deliver_due`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from alertd.dispatch.codec import GroupTexts
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.pipeline import MAX_RETRY_AFTER, Backoff, Delivery, DeliveryCounters, Outcome
from alertd.dispatch.plan import (
    LogEntry,
    LogKey,
    Plan,
    PlanState,
    Suppressed,
    changed_groups,
    migrate_log,
    plan,
    restore_groups,
)
from alertd.dispatch.routes import InhibitRule, Route
from alertd.dispatch.silences import SilenceStore
from alertd.model import Alert, AlertState, Notification, Transition, TransitionKind
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
        max_retry_after: float = MAX_RETRY_AFTER,
        immediate: frozenset[str] = frozenset(),
        max_notifications: int = 0,
    ) -> None:
        self.route = route
        self.max_notifications = max_notifications
        """Notifications one planning call sends one receiver before they go as one (0: no bound)."""
        self.immediate = immediate
        """Receivers told of each firing at once and alone (the actions; see `alertd.dispatch.plan`)."""
        self.inhibit_rules = tuple(inhibit_rules)
        self.silences = silences if silences is not None else SilenceStore()
        self.outbox = outbox
        self.delivery = Delivery(outbox, notifiers, backoff=backoff, rng=rng, max_retry_after=max_retry_after)
        groups = restore_groups(outbox.load_groups(), route)
        self._state = PlanState(groups, migrate_log(outbox.load_log(), groups))
        self._next_plan: float | None = min((g.next_flush for g in groups.values()), default=None)
        self._group_texts = GroupTexts()
        self.last_plan: Plan | None = None

    @property
    def counters(self) -> DeliveryCounters:
        """Delivered / failed / retried / deferred counts per receiver."""
        return self.delivery.counters

    def submit(
        self,
        transitions: Sequence[Transition],
        alerts: Mapping[str, Alert] | None,
        now: float,
        *,
        also: Callable[[sqlite3.Connection], None] | None = None,
    ) -> Plan:
        """Plan what is due at `now` and commit it, with the notification log, the open groups and what
        `also` writes, to the outbox in one transaction. The plan is kept only once that commits.

        An alert that fired and resolved within these transitions (a NaN followed by finite values in
        one poll) is still notified as firing: the transitions are planned in phases, cut before each
        such resolution, with the alert counted as firing in the earlier phase.
        """
        phases = _phases(transitions)
        state = self._state
        notes: list[Notification] = []
        muted: list[Suppressed] = []
        updates: dict[LogKey, LogEntry] = {}
        silences = self.silences.active(now)
        for i, phase in enumerate(phases):
            current = alerts
            if i < len(phases) - 1:
                fired = {t.fingerprint: _alert_of(t) for t in phase if t.state is TransitionKind.FIRING}
                current = fired | dict(alerts or {})
            result = plan(
                state,
                transitions=phase,
                alerts=current,
                route=self.route,
                inhibit_rules=self.inhibit_rules,
                silences=silences,
                now=now,
                immediate=self.immediate,
                max_notifications=self.max_notifications,
            )
            notes += result.notifications
            muted += result.suppressed
            updates.update(result.log_updates)
            state = result.state
        groups = changed_groups(self._state.groups, state.groups, self._group_texts)
        self.outbox.commit_plan(notes, updates, groups=groups, also=also)
        self._state = state
        self._next_plan = result.next_run
        self.last_plan = Plan(tuple(notes), tuple(muted), state, updates, result.next_run)
        return self.last_plan

    def flush_groups(self, alerts: Mapping[str, Alert] | None, now: float) -> Plan:
        """Flush every open group now, whatever its timers say, and commit the plan (`alertd exec` ends: what
        waits for a `group_interval` would otherwise be told only when an alertd opens this state again)."""
        groups = {k: replace(g, next_flush=min(g.next_flush, now)) for k, g in self._state.groups.items()}
        self._state = PlanState(groups, self._state.log)
        return self.submit((), alerts, now)

    async def deliver_due(self, now: float) -> list[Outcome]:
        """Send everything in the outbox that is due at `now`."""
        return await self.delivery.deliver_due(now)

    def due(self, now: float) -> bool:
        """Whether a group timer is due at `now` (`submit` would flush a group, or drop a resolved one)."""
        return self._next_plan is not None and self._next_plan <= now

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
        immediate: frozenset[str] | None = None,
        max_notifications: int | None = None,
    ) -> None:
        """Use a reloaded configuration; open groups keep the route they were made with until flushed."""
        self.route = route
        if immediate is not None:
            self.immediate = immediate
        if max_notifications is not None:
            self.max_notifications = max_notifications
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
