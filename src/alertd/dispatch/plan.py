"""Notification planning: Alertmanager's aggregation groups and dedup stage as one pure function.

`plan(state, ...)` takes what the engine reported, the notification log, the routes, silences and
inhibition rules and `now`, and returns the notifications due now, what was muted and why, the new
state and when planning must run again. No I/O, no clock reads; the state is never mutated.

Timing, per group (one route, one set of group labels) as in Alertmanager's `dispatch.go`:
- a new group is flushed `group_wait` after its first alert (at once when the alert is older than that);
- after each flush the next is `group_interval` later; alerts added meanwhile wait for it;
- a group whose alerts are all resolved is dropped after its flush.
At each flush, per receiver, `DedupStage.needsUpdate` decides: send when a firing alert is new to the
notification log, when all alerts resolved after firing ones were sent, when resolved alerts are new and
`send_resolved` is on, or when `repeat_interval` has passed since the last send.

A storm is one notification: when one planning call has more than `max_notifications` notifications for
one receiver (many groups due at once: a NaN in thousands of series grouped by a label each has), they go
to it as one notification, which holds all their alerts (the smallest groups first), with the labels the
groups share as its group labels and `{storm}:{...}` of those labels as its group key. Each group's
notification-log entry is kept as if it had gone alone, so repeats and resolutions follow each group's own
timers (and are merged again when they fall due together). 0: no bound.

Receivers named `immediate` (the actions: kill, stop_file, wandb_stop, slurm) are not grouped: each alert
that turns FIRING is handed to each of them at once, alone, in the planning call that saw the transition
(after silences, inhibitions and the route's mute intervals, as for everyone), and never again: no
group_wait, no group_interval, no repeats, no resolutions. An action acts once per firing, within
milliseconds, whatever an earlier alert of the same group did.
"""

from __future__ import annotations

import hashlib
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from alertd.dispatch.codec import GroupTexts, group_from_json
from alertd.dispatch.matchers import Silence, alert_label_map
from alertd.dispatch.routes import InhibitRule, Route, bypass_route
from alertd.model import Alert, AlertState, Labels, Notification, Transition, TransitionKind, legacy_fingerprint

MAX_NOTIFICATIONS = 10
"""Notifications one planning call sends one receiver at most before they go as one (`delivery:
max_notifications_per_flush`)."""
STORM_KEY = "{storm}"
"""The route part of the group key of the notification a storm's groups go as."""

LogKey = tuple[str, str]
"""(group key, receiver): one notification-log entry."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """What was last sent for one group to one receiver (Alertmanager's nflog entry)."""

    firing: frozenset[str]
    resolved: frozenset[str]
    sent_at: float
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Group:
    """An aggregation group: the alerts of one route with the same group labels, latest transition each."""

    key: str
    route: Route
    labels: Labels
    alerts: Mapping[str, Transition]
    next_flush: float


@dataclass(frozen=True, slots=True)
class PlanState:
    """The planner's memory between calls: open groups and the notification log."""

    groups: Mapping[str, Group] = field(default_factory=dict)
    log: Mapping[LogKey, LogEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Suppressed:
    """An alert left out of a notification: `reason` is `silenced` (by silence id), `inhibited` (by the
    fingerprint of the muting alert), `muted` (by the route's time intervals, named in `by`) or `unrouted`
    (no route with a receiver)."""

    fingerprint: str
    rule: str
    labels: Labels
    group_key: str
    reason: str
    by: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of one planning call."""

    notifications: tuple[Notification, ...]
    suppressed: tuple[Suppressed, ...]
    state: PlanState
    log_updates: Mapping[LogKey, LogEntry]
    next_run: float | None


def group_key(route: Route, labels: Labels) -> str:
    """Alertmanager-style group key: `{route}:{label="value",...}`."""
    return route.key + ":{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def plan(
    state: PlanState,
    *,
    transitions: Sequence[Transition],
    alerts: Mapping[str, Alert] | None,
    route: Route,
    inhibit_rules: Sequence[InhibitRule] = (),
    silences: Sequence[Silence] = (),
    now: float,
    immediate: frozenset[str] = frozenset(),
    max_notifications: int = 0,
) -> Plan:
    """Plan the notifications due at `now`.

    `alerts` is the engine's current pending/firing alerts; when given, firing alerts no group holds
    (after a restart) are added, and alerts that vanished from it without a transition count as resolved.
    `immediate`: the receivers that get each new firing alone and at once (see the module docstring).
    `max_notifications`: beyond this many for one receiver, the grouped notifications go as one (0: no bound).
    """
    groups = dict(state.groups)
    changes = (t for t in transitions if t.state in (TransitionKind.FIRING, TransitionKind.RESOLVED))
    unrouted: list[Suppressed] = _insert(groups, changes, route, now)
    if alerts is not None:
        _reconcile(groups, alerts, route, now)
    sources = FiringSources(groups, alerts)
    active = [s for s in silences if s.is_active(now)]
    log = dict(state.log)
    updates: dict[LogKey, LogEntry] = {}
    sent: list[Notification] = []
    muted: list[Suppressed] = list(unrouted)
    if immediate:
        notes, supp = _immediate(transitions, route, immediate, sources, inhibit_rules, active, now)
        sent += notes
        muted += supp
    grouped: list[Notification] = []
    for key in sorted(groups):
        group = groups[key]
        if group.next_flush > now:
            continue
        notes, supp, entries = _flush(group, log, sources, inhibit_rules, active, now, immediate)
        grouped += notes
        muted += supp
        updates.update(entries)
        log.update(entries)
        rest = {fp: t for fp, t in group.alerts.items() if t.state is TransitionKind.FIRING}
        if rest:
            groups[key] = replace(group, alerts=rest, next_flush=now + group.route.group_interval)
        else:
            del groups[key]
    sent += _storms_merged(grouped, max_notifications, now) if max_notifications else grouped
    next_run = min((g.next_flush for g in groups.values()), default=None)
    return Plan(tuple(sent), tuple(muted), PlanState(groups, log), updates, next_run)


def _storms_merged(notes: Sequence[Notification], most: int, now: float) -> list[Notification]:
    """The notifications, those of a receiver that has more than `most` as one (see the module docstring)."""
    by_receiver: dict[str, list[Notification]] = {}
    for n in notes:
        by_receiver.setdefault(n.receiver, []).append(n)
    out: list[Notification] = []
    for receiver, mine in by_receiver.items():
        if len(mine) <= most:
            out += mine
            continue
        mine = sorted(mine, key=lambda n: (len(n.alerts), n.group_key))  # a lone alert is not lost in the storm
        shared = set(mine[0].group_labels)
        for n in mine[1:]:
            shared &= set(n.group_labels)
        labels: Labels = tuple(sorted(shared))
        alerts = tuple(t for n in mine for t in n.alerts)
        alerts = tuple(sorted(alerts, key=lambda t: t.state is not TransitionKind.FIRING))  # stable: groups kept
        status = "firing" if any(n.status == "firing" for n in mine) else "resolved"
        gkey = STORM_KEY + ":{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
        key = idempotency_key(receiver, gkey, status, alerts)
        out.append(Notification(receiver, gkey, labels, status, alerts, key, now))
    return out


def changed_groups(old: Mapping[str, Group], new: Mapping[str, Group], texts: GroupTexts) -> dict[str, str | None]:
    """The groups to write (their JSON, as the outbox stores them) or delete (None) so the stored ones become `new`
    (`texts`: the caller's parts of its groups' JSON, kept from one call to the next)."""
    out: dict[str, str | None] = {key: None for key in old.keys() - new.keys()}
    for key in out:
        texts.forget(key)
    for key, g in new.items():
        if old.get(key) is not g:
            out[key] = texts.text(key, g.route.key, g.labels, g.alerts, g.next_flush)
    return out


def restore_groups(saved: Mapping[str, str], root: Route) -> dict[str, Group]:
    """The open groups the outbox kept, on today's routes; a group whose route is gone puts its alerts
    through today's routes instead (flushed when it was due)."""
    routes = {r.key: r for r in root.walk()}
    groups: dict[str, Group] = {}
    for key, text in saved.items():
        route_key, labels, alerts, next_flush = group_from_json(text)
        alerts = {t.fingerprint: t for t in alerts.values()}  # keys written by an older alertd: recomputed
        route = routes.get(route_key)
        if route is None and route_key.startswith("notify:"):
            route = bypass_route(root, tuple(route_key.removeprefix("notify:").split(",")))
        if route is not None:
            groups[key] = Group(key, route, labels, alerts, next_flush)
            continue
        _insert(groups, alerts.values(), root, next_flush)
    return groups


def migrate_log(log: Mapping[LogKey, LogEntry], groups: Mapping[str, Group]) -> dict[LogKey, LogEntry]:
    """The notification log with fingerprints an older alertd wrote (`alertd.model.legacy_fingerprint`)
    replaced by today's, for every alert an open group holds: after an upgrade an alert already sent is
    not sent again as if it were new. Fingerprints already today's are left as they are."""
    old_to_new = {
        legacy_fingerprint(t.rule, t.labels): fp
        for g in groups.values()
        for fp, t in g.alerts.items()
        if legacy_fingerprint(t.rule, t.labels) != fp
    }
    if not old_to_new:
        return dict(log)

    def renamed(fps: frozenset[str]) -> frozenset[str]:
        return frozenset(old_to_new.get(fp, fp) for fp in fps)

    return {k: replace(e, firing=renamed(e.firing), resolved=renamed(e.resolved)) for k, e in log.items()}


def _routes_for(t: Transition, labels: Mapping[str, str], root: Route) -> list[Route]:
    if t.notify:
        return [bypass_route(root, tuple(t.notify))]
    return [r for r in root.match(labels) if r.receivers]


def _insert(groups: dict[str, Group], transitions: Iterable[Transition], root: Route, now: float) -> list[Suppressed]:
    """Put each transition in the groups of its routes, in order (a group's alerts copied once, however many
    join it: a storm of thousands is linear); the firing ones no route takes are returned as unrouted."""
    unrouted: list[Suppressed] = []
    joined: dict[str, tuple[Group, dict[str, Transition]]] = {}
    for t in transitions:
        labels = alert_label_map(t.rule, t.labels, t.severity)
        routes = _routes_for(t, labels, root)
        if not routes:
            if _firing(t):
                unrouted.append(Suppressed(t.fingerprint, t.rule, t.labels, "", "unrouted"))
            continue
        for r in routes:
            glabels = r.group_labels(labels)
            key = group_key(r, glabels)
            entry = joined.get(key)
            if entry is None:
                group = groups.get(key)
                if group is None:
                    # A resolution may open a group too: the flush tells receivers that were sent it firing.
                    flush = now if t.time + r.group_wait <= now else now + r.group_wait
                    group = Group(key, r, glabels, {}, flush)
                entry = joined[key] = (group, dict(group.alerts))
            entry[1][t.fingerprint] = t
    for key, (group, alerts) in joined.items():
        groups[key] = replace(group, alerts=alerts)
    return unrouted


def _firing(t: Transition) -> bool:
    return t.state is TransitionKind.FIRING


def _reconcile(groups: dict[str, Group], alerts: Mapping[str, Alert], root: Route, now: float) -> None:
    firing = {fp: a for fp, a in alerts.items() if a.state is AlertState.FIRING}
    # one pass over every group's alerts, not a set and a dict made per group: a storm has thousands of groups
    held = [(key, fp) for key, g in groups.items() for fp, t in g.alerts.items() if t.state is TransitionKind.FIRING]
    gone: dict[str, list[str]] = {}
    for key, fp in [kf for kf in held if kf[1] not in firing]:
        gone.setdefault(key, []).append(fp)
    for key, fps in gone.items():
        mine = groups[key].alerts
        groups[key] = replace(groups[key], alerts={**mine, **{fp: _resolved_now(mine[fp], now) for fp in fps}})
    held_fps = {fp for _, fp in held}
    # unrouted ones were reported when they fired
    _insert(groups, (transition_of(a) for fp, a in firing.items() if fp not in held_fps), root, now)


def _resolved_now(t: Transition, now: float) -> Transition:
    return replace(t, state=TransitionKind.RESOLVED, time=now)


def transition_of(alert: Alert) -> Transition:
    """The firing transition standing for a firing alert the planner has not seen fire (a restart)."""
    return Transition(
        rule=alert.rule,
        state=TransitionKind.FIRING,
        time=alert.fired_at if alert.fired_at is not None else alert.time,
        step=alert.step,
        value=alert.value,
        labels=alert.labels,
        severity=alert.severity,
        annotations=alert.annotations,
        active_at=alert.active_at,
        notify=alert.notify,
    )


class FiringSources(Mapping[str, Mapping[str, str]]):
    """The label maps of the firing alerts (by fingerprint), which inhibit rules look through: those of `alerts`,
    or where none are given, of the alerts the groups hold as firing.

    Made at the first look, not with every plan: most plans check no alert against an inhibit rule (there are
    none, or no group is due), and a storm's thousands of firing alerts would cost a label map each per plan.
    (`plan` changes its groups while it flushes, but not which alerts they hold as firing.)"""

    def __init__(self, groups: Mapping[str, Group], alerts: Mapping[str, Alert] | None) -> None:
        self._groups, self._alerts = groups, alerts
        self._maps: dict[str, dict[str, str]] | None = None

    def _made(self) -> dict[str, dict[str, str]]:
        if self._maps is None:
            if self._alerts is not None:
                self._maps = {
                    fp: alert_label_map(a.rule, a.labels, a.severity)
                    for fp, a in self._alerts.items()
                    if a.state is AlertState.FIRING
                }
            else:
                self._maps = {
                    fp: alert_label_map(t.rule, t.labels, t.severity)
                    for g in self._groups.values()
                    for fp, t in g.alerts.items()
                    if t.state is TransitionKind.FIRING
                }
        return self._maps

    def __getitem__(self, fingerprint: str) -> Mapping[str, str]:
        return self._made()[fingerprint]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())

    def items(self) -> ItemsView[str, Mapping[str, str]]:
        return self._made().items()  # the dict's own view: no look-up per entry


def _immediate(
    transitions: Sequence[Transition],
    root: Route,
    immediate: frozenset[str],
    sources: Mapping[str, Mapping[str, str]],
    rules: Sequence[InhibitRule],
    silences: Sequence[Silence],
    now: float,
) -> tuple[list[Notification], list[Suppressed]]:
    """Each new firing, alone, to each immediate receiver its routes name (once per receiver)."""
    notes: list[Notification] = []
    muted: list[Suppressed] = []
    for t in transitions:
        if not _firing(t):
            continue
        labels = alert_label_map(t.rule, t.labels, t.severity)
        done: set[str] = set()
        for r in _routes_for(t, labels, root):
            receivers = [x for x in r.receivers if x in immediate and x not in done]
            if not receivers:
                continue
            done.update(receivers)
            glabels = r.group_labels(labels)
            gkey = group_key(r, glabels)
            why = _mute_reason(t, sources, rules, silences)
            if why is None and (mute := r.muted_by(now)) is not None:
                why = ("muted", mute)
            if why is not None:
                muted.append(Suppressed(t.fingerprint, t.rule, t.labels, gkey, why[0], why[1]))
                continue
            for receiver in receivers:
                key = idempotency_key(receiver, gkey, "firing", (t,))
                notes.append(Notification(receiver, gkey, glabels, "firing", (t,), key, now))
    return notes, muted


def _mute_reason(
    t: Transition,
    sources: Mapping[str, Mapping[str, str]],
    rules: Sequence[InhibitRule],
    silences: Sequence[Silence],
) -> tuple[str, str] | None:
    labels = alert_label_map(t.rule, t.labels, t.severity)
    for s in silences:
        if s.matches(labels):
            return "silenced", s.id
    for rule in rules:
        by = rule.inhibitor(t.fingerprint, labels, sources)
        if by is not None:
            return "inhibited", by
    return None


def _flush(
    group: Group,
    log: Mapping[LogKey, LogEntry],
    sources: Mapping[str, Mapping[str, str]],
    rules: Sequence[InhibitRule],
    silences: Sequence[Silence],
    now: float,
    immediate: frozenset[str] = frozenset(),
) -> tuple[list[Notification], list[Suppressed], dict[LogKey, LogEntry]]:
    kept: dict[str, Transition] = {}
    muted: list[Suppressed] = []
    for fp, t in sorted(group.alerts.items()):
        why = _mute_reason(t, sources, rules, silences)
        if why is None:
            kept[fp] = t
        else:
            muted.append(Suppressed(fp, t.rule, t.labels, group.key, why[0], why[1]))
    if not kept:
        return [], muted, {}
    mute = group.route.muted_by(now)
    if mute is not None:  # as Alertmanager: dropped, not postponed, and nothing logged as sent
        return [], muted + [Suppressed(fp, t.rule, t.labels, group.key, "muted", mute) for fp, t in kept.items()], {}
    firing = frozenset(fp for fp, t in kept.items() if _firing(t))
    resolved = frozenset(kept) - firing
    notes: list[Notification] = []
    entries: dict[LogKey, LogEntry] = {}
    r = group.route
    for receiver in r.receivers:
        if receiver in immediate:
            continue  # told of each firing at once (`_immediate`), never by the group
        entry = log.get((group.key, receiver))
        if not needs_update(entry, firing, resolved, r.send_resolved, r.repeat_interval, now):
            continue
        new = LogEntry(firing, resolved, now, 0 if entry is None else entry.seq + 1)
        entries[(group.key, receiver)] = new
        shown = [t for t in kept.values() if _firing(t) or r.send_resolved]
        repeat = entry is not None and entry.firing == firing and entry.resolved == resolved
        if shown:
            notes.append(_notification(receiver, group, shown, new, repeat, now))
    return notes, muted, entries


def needs_update(
    entry: LogEntry | None,
    firing: frozenset[str],
    resolved: frozenset[str],
    send_resolved: bool,
    repeat_interval: float,
    now: float,
) -> bool:
    """Alertmanager's `DedupStage.needsUpdate`: whether this receiver must be told about the group now."""
    if entry is None:
        return bool(firing)
    if not firing <= entry.firing:
        return True
    if not firing:
        return bool(entry.firing)
    if send_resolved and not resolved <= entry.resolved:
        return True
    return entry.sent_at <= now - repeat_interval


def _notification(
    receiver: str, group: Group, shown: Iterable[Transition], entry: LogEntry, repeat: bool, now: float
) -> Notification:
    # `shown` comes in fingerprint order; the stable sort keeps it among equal (state, time)
    alerts = tuple(sorted(shown, key=lambda t: (t.state is not TransitionKind.FIRING, t.time)))
    status = "firing" if any(_firing(t) for t in alerts) else "resolved"
    return Notification(
        receiver=receiver,
        group_key=group.key,
        group_labels=group.labels,
        status=status,
        alerts=alerts,
        key=idempotency_key(receiver, group.key, status, alerts, entry.seq if repeat else None),
        created=now,
    )


def idempotency_key(
    receiver: str, gkey: str, status: str, alerts: Iterable[Transition], repeat: int | None = None
) -> str:
    """A key for one planned notification, derived only from what it tells: receiver, group, status and
    each alert's transition (fingerprint, state, time); a repeat (`repeat_interval`) adds its number.

    The same transitions planned again (samples read again after a crash) get the same key, however often
    and whenever it happens, so a receiver that drops by key sees each transition once.
    """
    lines = [receiver, gkey, status]
    lines += sorted(f"{t.fingerprint} {t.state.value} {t.time!r}" for t in alerts)
    if repeat is not None:
        lines.append(f"repeat {repeat}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]
