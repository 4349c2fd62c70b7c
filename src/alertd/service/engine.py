"""The engine the service drives: the buffer, the rules and their state, and how an evaluation is logged."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from alertd.buffer import SeriesBuffer
from alertd.config import Config
from alertd.model import Restart, SeriesKey, Transition, TransitionKind
from alertd.rules.evaluate import EvalState, Evaluation, PairKey, RuleSet, evaluate
from alertd.runs.tracker import RunTracker

log = logging.getLogger("alertd")

TRANSITIONS_LOGGED = 100
"""Transitions of one evaluation logged one by one; the rest of a storm is one line counting them by rule and state."""


@dataclass
class Engine:
    """The buffer, the rules and their state: everything evaluation touches."""

    config: Config
    buffer: SeriesBuffer
    ruleset: RuleSet
    state: EvalState = field(default_factory=EvalState)
    runs: RunTracker = field(default_factory=RunTracker)
    rule_errors: dict[str, str] = field(default_factory=dict)
    last_eval: float | None = None
    eval_seconds: float = 0.0
    dirty: set[PairKey] | None = None
    """The pairs whose tracks changed since the state was last committed (None: not known)."""

    def evaluate(self, now: float) -> Evaluation:
        """Evaluate at `now` and keep the new state."""
        ev = evaluate(self.ruleset, self.buffer, now, self.state, in_place=True)
        if self.dirty is not None:
            self.dirty |= ev.state.written
        self.state = ev.state
        self.rule_errors.update(ev.errors)
        self.last_eval = now
        return ev

    def alerting(self, key: SeriesKey) -> bool:
        """Whether an alert is pending or firing on the series `key` (the buffer's `pinned`)."""
        active = self.state.active_pairs()
        return any((rule.name, key) in active for rule in self.ruleset.for_series(key))


def log_evaluation(ev: Evaluation) -> None:
    """An evaluation on alertd's log: each rule error, each transition (the first TRANSITIONS_LOGGED; the rest
    of a storm counted on one line)."""
    for rule, error in ev.errors.items():
        log.warning("rule %s: %s", rule, error, extra={"rule": rule})
    for t in ev.transitions[:TRANSITIONS_LOGGED]:
        log_transition(t)
    if len(ev.transitions) > TRANSITIONS_LOGGED:
        _log_storm(ev.transitions[TRANSITIONS_LOGGED:])


def log_restarts(restarts: Iterable[Restart]) -> None:
    """The series whose step went back (a run restarted from a checkpoint), one line each."""
    for r in restarts:
        log.info("series %s restarted: step %d -> %d, %d samples replaced", r.series, r.from_step, r.to_step, r.dropped)


def log_warnings(config: Config) -> None:
    """What `alertd check` prints as warnings (a severity no route uses), logged once per load."""
    for warning in config.warnings:
        log.warning("rules: %s", warning)


def _log_storm(rest: Sequence[Transition]) -> None:
    """The transitions of one evaluation past TRANSITIONS_LOGGED: one line, counted by rule and state."""
    counts: dict[tuple[str, str], int] = {}
    for t in rest:
        counts[(t.rule, t.state.value)] = counts.get((t.rule, t.state.value), 0) + 1
    shown = ", ".join(f"{rule} {state}: {n}" for (rule, state), n in sorted(counts.items()))
    log.warning("and %d more transitions of this evaluation (%s)", len(rest), shown, extra={"transitions": len(rest)})


def log_transition(t: Transition) -> None:
    """A transition on alertd's log: WARNING while a critical or warning alert is pending or firing, INFO for an
    `info` alert and for every resolution (`alertd.notify.log.level_of` judges the log notifier's lines alike)."""
    firing = t.state in (TransitionKind.FIRING, TransitionKind.PENDING)
    level = logging.WARNING if firing and t.severity != "info" else logging.INFO
    labels = dict(t.labels)
    log.log(
        level,
        "alert %s %s %s",
        t.rule,
        t.state.value,
        ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        extra={"rule": t.rule, "state": t.state.value, "step": t.step, "value": str(t.value)},
    )
