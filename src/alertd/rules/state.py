"""The alert state machine of one rule on one series, stepped sample by sample and through time.

The semantics are Prometheus' (`rules/alerting.go`): a condition that becomes true makes the alert
pending; it fires once the condition has held for `for`; when it stops holding, a firing alert stays
firing for `keep_firing_for` and then resolves, while a pending one just goes away.

Time-based changes (a pending alert reaching its `for`, a `keep_firing_for` running out, a series
going absent) happen at the exact instant they are due, not at the next evaluation tick, so the same
samples give the same transitions however they are batched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from alertd.model import AlertState, TransitionKind
from alertd.rules.rule import Rule

Emit = Callable[["Track", TransitionKind, float], None]


class Track:
    """What the engine remembers about one (rule, series) pair. Copied when changed, never shared; but a steady
    pair's note of a new sample is made on the track itself when the previous state is handed over (`in_place`)."""

    __slots__ = (
        "active_at",
        "annotations",
        "clock",
        "cond",
        "fired_at",
        "generation",
        "keep_since",
        "last_time",
        "park",
        "position",
        "slot",
        "state",
        "step",
        "streak",
        "time",
        "value",
    )

    def __init__(self) -> None:
        self.generation = 0
        self.position = 0
        self.streak = 0
        self.cond = False
        self.clock = -math.inf
        self.state = AlertState.INACTIVE
        self.active_at = 0.0
        self.fired_at: float | None = None
        self.keep_since: float | None = None
        self.last_time: float | None = None
        self.value = math.nan
        self.step: int | None = None
        self.time = 0.0
        self.annotations: tuple[tuple[str, str], ...] = ()
        self.park: Any = None
        """The column of the parking where its pair is parked (`rules/parking.py`), its slot there; None: not."""
        self.slot = -1

    FIELDS = ("active_at", "annotations", "clock", "cond", "fired_at", "generation", "keep_since", "last_time",
              "position", "state", "step", "streak", "time", "value")  # fmt: skip
    """What the track says (its other slots are where it is parked)."""

    def copy(self) -> Track:
        """A shallow copy to change without touching the previous evaluation's state."""
        new = Track.__new__(Track)
        new.generation, new.position, new.streak, new.cond = self.generation, self.position, self.streak, self.cond
        new.clock = self.clock
        new.state, new.active_at, new.fired_at = self.state, self.active_at, self.fired_at
        new.keep_since, new.last_time, new.value = self.keep_since, self.last_time, self.value
        new.step, new.time, new.annotations = self.step, self.time, self.annotations
        new.park, new.slot = None, -1
        return new


def next_event(rule: Rule, tr: Track, finished_at: float | None) -> float | None:
    """When the next time-based change of this pair is due, if any.

    `finished_at`: when the series' run ended (or another process took the series over), if it did. An
    absence ends then; so does any other condition that holds on the series' last sample: the alerts of a
    run that has ended resolve (the caller passes None for the series that tell how a run ended).
    """
    due = math.inf
    absent = rule.absent
    if absent is not None and tr.last_time is not None:
        if not tr.cond:
            onset = tr.last_time + absent.seconds
            if onset > tr.clock and (finished_at is None or finished_at > onset):
                due = onset
        elif finished_at is not None:
            due = max(finished_at, tr.active_at)  # An absence ends once the run is known finished or taken over.
    elif finished_at is not None and tr.cond and tr.last_time is not None and finished_at >= tr.last_time:
        due = max(finished_at, tr.clock)  # no sample after the end: the condition holds no more from then
    if tr.state is AlertState.PENDING and tr.cond:
        due = min(due, tr.active_at + rule.hold)
    if tr.state is AlertState.FIRING and tr.keep_since is not None:
        due = min(due, tr.keep_since + rule.keep_firing_for)
    return None if due == math.inf else due


def advance(
    rule: Rule, tr: Track, until: float, finished_at: float | None, emit: Emit, *, inclusive: bool
) -> float | None:
    """Apply every time-based change due before `until` (or at it, when `inclusive`); return when the next one is
    due (`next_event` after them), if any."""
    while True:
        due = next_event(rule, tr, finished_at)
        if due is None or due > until or (due == until and not inclusive):
            return due
        tr.clock = due
        if tr.state is AlertState.FIRING and tr.keep_since is not None and due == tr.keep_since + rule.keep_firing_for:
            _resolve(tr, due, emit)
        elif tr.state is AlertState.PENDING and tr.cond and due == tr.active_at + rule.hold:
            _fire(tr, due, emit)
        else:
            set_condition(rule, tr, not tr.cond, due, emit)


def set_condition(rule: Rule, tr: Track, cond: bool, t: float, emit: Emit) -> None:
    """The condition is `cond` from instant `t` on."""
    tr.cond = cond
    if cond:
        tr.keep_since = None
        if tr.state is AlertState.INACTIVE:
            tr.state = AlertState.PENDING
            tr.active_at = t
            tr.fired_at = None
            if rule.hold > 0:
                emit(tr, TransitionKind.PENDING, t)
        if tr.state is AlertState.PENDING and t - tr.active_at >= rule.hold:
            _fire(tr, t, emit)
        return
    if tr.state is AlertState.PENDING:
        tr.state = AlertState.INACTIVE
        emit(tr, TransitionKind.INACTIVE, t)
    elif tr.state is AlertState.FIRING:
        if rule.keep_firing_for <= 0:
            _resolve(tr, t, emit)
        elif tr.keep_since is None:
            tr.keep_since = t


def _fire(tr: Track, t: float, emit: Emit) -> None:
    tr.state = AlertState.FIRING
    tr.fired_at = t
    emit(tr, TransitionKind.FIRING, t)


def _resolve(tr: Track, t: float, emit: Emit) -> None:
    tr.state = AlertState.INACTIVE
    tr.keep_since = None
    emit(tr, TransitionKind.RESOLVED, t)
