"""Joining the series of one run for an `expr` rule: which series, which steps are ready to judge. Pure.

A run, for an expr rule, is a label set: the series `name{labels}` for each name of the expression, with
exactly the same labels (`source`, `run`, `host`, `pid`, ...). A glob name resolves, per run, to the one
series of that run whose metric it matches (the expression's exact names left aside); when it matches
several, the run is not judged and the rule reports an error naming them.

Steps: the expression is judged at each step where every named series has a sample with exactly that step
(the first sample of that step, when a series repeats one), in step order, each step once. A step is
judged only once every named series has reached it (its newest step >= that step: the watermark), or once
the run is known finished; so the answer does not depend on how the samples arrive or are batched. A step
where some series has no sample (an eval metric logged every N steps) is simply not judged.

Each join remembers the last step it passed (`last`), and per series the (generation, end) it last saw,
to notice a resume from a checkpoint (a step going back: a new generation): the steps from the resumed
step on are judged again, with the new samples.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from alertd.buffer import NO_STEP, Series
from alertd.model import Labels, SeriesKey
from alertd.rules.expr import Expr

JoinKey = tuple[str, Labels]
"""(rule name, the run's labels)."""
MAX_STEP = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Join:
    """What one (expr rule, run) remembers between evaluations. Replaced, never changed."""

    last: int = NO_STEP
    """The newest step passed (judged, or passed over because a series has no sample there)."""
    seen: tuple[frozenset[str], ...] = ()
    """Per name of the expression, the metrics of this run it matches (one for an exact name)."""
    marks: tuple[tuple[int, int], ...] = ()
    """Per name, the (generation, end) of its series when last looked at; empty: never looked at."""


def new_join(expr: Expr) -> Join:
    """A join that has seen nothing yet."""
    return Join(
        seen=tuple(
            frozenset() if g is not None else frozenset({n}) for n, g in zip(expr.names, expr.globs, strict=True)
        )
    )


def note_metrics(expr: Expr, join: Join, metrics: set[str]) -> Join:
    """The join with the glob names' matches among `metrics` (of this run) added."""
    if not any(g is not None for g in expr.globs):
        return join
    exact = {n for n, g in zip(expr.names, expr.globs, strict=True) if g is None}
    seen = list(join.seen)
    for slot, glob in enumerate(expr.globs):
        if glob is not None:
            hits = {m for m in metrics if m not in exact and glob.fullmatch(m)}
            if not hits <= seen[slot]:
                seen[slot] = seen[slot] | hits
    return Join(join.last, tuple(seen), join.marks)


def resolved(expr: Expr, join: Join, labels: Labels) -> list[SeriesKey] | str | None:
    """The series of each name for this run; an error message when a glob matches several; None when some
    name has no series yet."""
    keys = []
    for name, seen in zip(expr.names, join.seen, strict=True):
        if len(seen) > 1:
            shown = ", ".join(sorted(seen)[:5]) + (", ..." if len(seen) > 5 else "")
            where = ",".join(f'{k}="{v}"' for k, v in labels)
            return f"`{name}` matches {len(seen)} series of the run {{{where}}} ({shown}); it must match one"
        if not seen:
            return None
        keys.append(SeriesKey(next(iter(seen)), labels))
    return keys


def rewound(join: Join, series: list[Series]) -> int:
    """`join.last`, moved back before the first step that a resume (a new generation) of a series rewrote."""
    last = join.last
    if len(join.marks) != len(series):
        return last
    for (generation, end), s in zip(join.marks, series, strict=True):
        if s.generation != generation:
            i = s.index(s.first_new(generation, end))
            if i < len(s.steps) and s.steps[i] != NO_STEP:
                last = min(last, s.steps[i] - 1)
    return last


def watermark(series: list[Series], finished: bool) -> int:
    """The newest step every series has reached (all of them, once the run is known finished)."""
    if finished:
        return MAX_STEP
    low = MAX_STEP
    for s in series:
        if len(s.steps) <= s.start:
            return NO_STEP
        low = min(low, s.steps[-1])
    return low


def at_step(s: Series, step: int) -> int | None:
    """The array index of the first sample of `s` at exactly `step`, or None."""
    k = bisect_left(s.steps, step, s.start)
    return k if k < len(s.steps) and s.steps[k] == step else None


def next_index(s: Series, last: int) -> int:
    """The array index of the first sample of `s` after step `last`."""
    return bisect_right(s.steps, last, s.start)
