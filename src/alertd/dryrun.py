"""Replay recorded samples through evaluate() with the samples' own clock.

The service passes the wall clock as `now`; a replay passes the time of the samples it has fed.
Both call the same `evaluate`, so a dry-run answer is what the service would have done.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

from alertd._np import np
from alertd.buffer import DROPPED_METRIC, EVICTED_METRIC, MAX_TIME, BufferLimits, SeriesBuffer
from alertd.columns import ColumnList, Columns
from alertd.model import (
    Restart,
    Sample,
    SeriesKey,
    Transition,
    format_time,
    format_value,
    shown_annotations,
)
from alertd.replay_chunks import plan
from alertd.rules.evaluate import EvalState, Evaluation, RuleSet, evaluate
from alertd.runs.tracker import DERIVED, MARKERS, RunTracker

_TIME = attrgetter("time")
RUN_METRICS = DERIVED | MARKERS | {DROPPED_METRIC, EVICTED_METRIC}
"""The series a replay's run tracker and buffer make as it goes (not among the samples it plans its pieces by)."""


@dataclass
class Replay:
    """A replay in progress: the buffer and the engine state after the samples fed so far."""

    ruleset: RuleSet
    limits: BufferLimits = field(default_factory=BufferLimits)
    buffer: SeriesBuffer = field(init=False)
    state: EvalState = field(default_factory=EvalState)
    restarts: list[Restart] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    clock: float = float("-inf")
    stall_after: float = 600.0
    live: bool = False
    """True where `advance` is a live clock (rule unit tests): runs then stall when time passes without data."""
    runs: RunTracker = field(init=False)

    def __post_init__(self) -> None:
        self.buffer = SeriesBuffer(self.limits)
        self.runs = RunTracker(self.stall_after)

    def feed(self, samples: list[Sample], columns: Columns | None = None) -> Evaluation:
        """Append samples (in time order) and what they say of their runs; evaluate at the newest time.
        `columns`: the samples' (`alertd.columns`), where the caller has them.

        There is no live process in a replay: a run is stalled only by a gap inside its data.
        """
        if samples:
            derived = self.runs.observe(samples, samples[-1].time if self.live else None, columns)
            self.restarts += self.buffer.append(_merged(samples, derived), None, None if derived else columns)
            self.clock = max(self.clock, samples[-1].time)
        return self.advance(self.clock)

    def end(self) -> Evaluation:
        """The data is over: runs that announced a start and never ended are lost."""
        derived = self.runs.end_of_replay()
        if derived:
            self.buffer.append(sorted(derived, key=lambda s: s.time))
        return self.advance(self.clock)

    def advance(self, now: float) -> Evaluation:
        """Evaluate at `now` without new samples (time-based changes only)."""
        self.clock = max(self.clock, now)
        if self.live:
            derived = self.runs.tick(self.clock)
            if derived:
                self.buffer.append(derived)
        ev = evaluate(self.ruleset, self.buffer, self.clock, self.state)
        self.state = ev.state
        self.errors.update(ev.errors)
        return ev


def _usable_times(samples: Iterable[Sample], buffer: SeriesBuffer) -> Iterator[Sample]:
    """The samples, each time no clock can use (NaN, infinite, after 9999) replaced by the previous time
    of its series in the input; dropped when it has none. Counted and logged once per series."""
    last: dict[SeriesKey, float] = {}
    for s in samples:
        if -MAX_TIME < s.time <= MAX_TIME:
            last[s.series] = s.time
            yield s
            continue
        time = buffer.retime(s.series, s.time, last.get(s.series), arrival=False)
        if time is not None:
            yield s._replace(time=time)


def _time_ordered(
    samples: Iterable[Sample], buffer: SeriesBuffer, until: float | None
) -> tuple[list[Sample], Columns | None]:
    """The usable samples (`_usable_times`) up to `until`, sorted by time (a stable sort), and their columns where
    it had their times as floats (else None): a source's `ColumnList` gives those of the rows it decoded a column
    at a time, the others are taken apart here.

    Where every time is usable (the common case) this is done on a column of the times: the same
    samples in the same order as the sample-by-sample way, which any other input takes."""
    batch = samples if isinstance(samples, list) else list(samples)  # copied below, in order
    if isinstance(batch, ColumnList):
        columns = batch.columns()
    else:
        try:
            columns = Columns.of(batch, np.frombuffer(array("d", map(_TIME, batch)), np.float64))
        except (TypeError, ValueError, OverflowError, AttributeError):
            columns = None
    times = None if columns is None else columns.times
    if times is None or not bool(((times > -MAX_TIME) & (times <= MAX_TIME)).all()):
        usable = _usable_times(batch, buffer)
        return sorted((s for s in usable if until is None or s.time <= until), key=_TIME), None
    assert columns is not None
    if until is not None:
        keep = np.flatnonzero(times <= until)
        if len(keep) < len(batch):
            batch = [batch[k] for k in keep.tolist()]
            columns = columns.take(keep, batch)
            times = columns.times
    if len(times) < 2 or bool((times[1:] >= times[:-1]).all()):
        ordered = list(batch)
        return ordered, columns.take(slice(None), ordered)
    order = np.argsort(times, kind="stable")
    ordered = [batch[k] for k in order.tolist()]
    return ordered, columns.take(order, ordered)


def lookback(ruleset: RuleSet, key: SeriesKey, times: Any, reach: int) -> int | None:
    """How many samples before a judged one the rules on `key` read at most (`LooksBack`), given the series'
    times and the samples the service's buffer holds (`reach`); None where one of them does not say (a condition
    without `lookback`: `expr`, `peers`, `plateau`)."""
    most = 0
    for rule in ruleset.for_series(key):
        how = getattr(rule.condition, "lookback", None)
        if how is None:
            return None
        most = max(most, how(times, reach))
    return most


def may_widen(ruleset: RuleSet) -> bool:
    """Whether a replay may widen its buffer (`replay_chunks.plan`) for these rules: the series the run tracker and
    the buffer make as the replay goes (`RUN_METRICS`) are not among the samples it plans by, so no rule that may
    watch them may leave its lookback unsaid (`expr`, `peers`, `plateau`)."""
    unsaid = [rule for rule in ruleset.rules if getattr(rule.condition, "lookback", None) is None]
    return not any(rule.watches_metric(metric) for rule in unsaid for metric in RUN_METRICS)


def _merged(samples: list[Sample], derived: list[Sample]) -> list[Sample]:
    return sorted(samples + derived, key=lambda s: s.time) if derived else samples


def replay(
    ruleset: RuleSet,
    samples: Iterable[Sample],
    limits: BufferLimits | None = None,
    until: float | None = None,
    stall_after: float = 600.0,
    fed: Callable[[int, int], None] | None = None,
) -> Iterator[Transition]:
    """Every transition the rules make over `samples` (sorted by time here), in time order.

    `fed(done, total)`, where given, is called before the first sample and after each chunk with the number
    of samples fed so far and the number to feed (a progress bar's; it must not raise)."""
    run = Replay(ruleset, limits or BufferLimits(), stall_after=stall_after)
    ordered, columns = _time_ordered(samples, run.buffer, until)  # taken apart once for every piece
    times = None if columns is None else columns.times
    if fed is not None:
        fed(0, len(ordered))
    looks_back = partial(lookback, ruleset, reach=run.limits.reaches())
    limits, cuts = plan(ordered, looks_back, run.limits, times, columns, may_widen(ruleset))
    run.limits = run.buffer.limits = limits  # larger only where that changes nothing the rules read (`plan`)
    for i, j in cuts:
        yield from run.feed(ordered[i:j], None if columns is None else columns.piece(i, j)).transitions
        if fed is not None:
            fed(j, len(ordered))
    yield from run.end().transitions
    if until is not None:
        yield from run.advance(until).transitions


def transition_json(t: Transition) -> dict[str, object]:
    """A transition as one line of `dry-run --format json` (design section 5)."""
    out: dict[str, object] = {
        "rule": t.rule,
        "state": t.state.value,
        "time": format_time(t.time),
        "step": t.step,
        "value": format_value(t.value),
        "labels": dict(t.labels),
        "severity": t.severity,
    }
    if t.annotations:
        out["annotations"] = dict(t.annotations)
    return out


def transition_text(t: Transition) -> str:
    """A transition as one aligned line of text."""
    labels = dict(t.labels)
    metric = labels.pop("metric", "?")
    value = format_value(t.value)
    shown = value if isinstance(value, str) else f"{value:.6g}"
    step = "-" if t.step is None else str(t.step)
    rest = " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    line = f"{format_time(t.time):<24} {t.state.value.upper():<8} {t.rule:<24} {metric}={shown} step={step} {rest}"
    summary = shown_annotations(t).get("summary")  # resolved: what the rule says then, never the firing words
    return f"{line}  # {summary}" if summary else line


def dumps(t: Transition) -> str:
    """One JSON line."""
    return json.dumps(transition_json(t), separators=(", ", ": "))


def root_run_name(logdir: str) -> str:
    """The run name a dry-run gives a TensorBoard logdir's root run (its event files right in the logdir, `.` in the
    service): the logdir's directory name, as the training callbacks name a run, so that what a dry-run shows is a
    name, never `.`. The source sets it as it reads (`TensorBoardSource.root_run`): no sample is made twice."""
    name = os.path.basename(os.path.abspath(logdir))
    return name if name not in ("", ".", "..") else "."
