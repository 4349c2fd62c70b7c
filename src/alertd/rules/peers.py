"""`peers`: a series judged against the other series of its group (the ranks of one job). Pure.

A group is the series of one metric whose labels named in `by` are equal (`by: [source, run]`: the ranks of
a run). A peers condition is judged per group at instants, not per sample: at every instant where something
in the group changes, that is the time T of each sample (it enters) and T + span (it leaves: a sample counts
from T until T + span, that instant excluded; span is `over`, or `silent`). Between two such instants
nothing changes, so judging there is the same as judging at every instant. At an instant e:

- **ratio** (`stat`, `over`, `ratio`): a member's value is the mean (`math.fsum` / n) of its finite samples
  counting at e; the group's statistic (`max`, `min`, `avg`, `median`) is over the members' values, the judged
  member's own included; a member's test is `value / statistic <op> number`. Members without a finite value
  are neither in the statistic nor judged; fewer than 2 members with a value, or a statistic <= 0: nothing
  is judged.
- **silent** (`silent`): a member is silent when its newest sample at or before e no longer counts
  (T + silent <= e); the group is judged only while at least one member is not silent, and has 2 members or
  more (a member is one once it has a sample at or before e).

Then `count` (`>= 1` by default) compares the number of members whose test holds; when it holds, the
condition is true for each of them (the alert names the series: its labels), and false for every other.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from alertd.buffer import Series
from alertd.model import SeriesKey
from alertd.rules.compare import OPS

Stat = Literal["max", "min", "avg", "median"]
STATS: tuple[str, ...] = ("max", "min", "avg", "median")
MIN_MEMBERS = 2


@dataclass(frozen=True, slots=True)
class Peers:
    """The condition; `check` is never the judge (the engine judges the group: `judge`)."""

    by: tuple[str, ...]
    span: float
    """`over` (ratio) or `silent`, in seconds."""
    silent: bool = False
    stat: Stat = "median"
    op: str = ">"
    ratio: float = 1.0
    count_op: str = ">="
    count: int = 1

    def check(self, series: Series, i: int) -> bool:
        """Never true on one sample: a peers condition is judged per group (`alertd.rules.evaluate`)."""
        return False

    def describe(self) -> str:
        """`peers by source,run: mean over 120s / median > 1.5 (count >= 1)`."""
        by = ",".join(self.by)
        if self.silent:
            what = f"no sample for {self.span:g}s while a peer has one"
        else:
            what = f"mean over {self.span:g}s / {self.stat} {self.op} {self.ratio:g}"
        return f"peers by {by}: {what} (count {self.count_op} {self.count})"

    def group_of(self, key: SeriesKey) -> tuple[str, tuple[str, ...]]:
        """The group of `key`: its metric and the values of the `by` labels (a missing label is '')."""
        return key.metric, tuple(key.label(n) or "" for n in self.by)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One member at one instant: whether the condition holds, and what its alert shows."""

    cond: bool
    value: float
    step: int | None
    last_time: float | None


def mean_at(s: Series, e: float, span: float) -> float | None:
    """The mean of the finite values of `s` counting at instant `e` (T <= e < T + span), None when none."""
    hi = bisect_right(s.times, e, s.start)
    lo = bisect_right(s.times, e, s.start, hi, key=lambda t: t + span)
    xs = [v for v in s.values[lo:hi] if math.isfinite(v)]
    if not xs:
        return None
    try:
        m = math.fsum(xs) / len(xs)
    except OverflowError:
        return None
    return m if math.isfinite(m) else None


def statistic(stat: str, xs: Sequence[float]) -> float:
    """`max`, `min`, `avg` (fsum / n) or `median` of the (finite, not empty) values."""
    if stat == "max":
        return max(xs)
    if stat == "min":
        return min(xs)
    if stat == "avg":
        return math.fsum(xs) / len(xs)
    return float(median(xs))


def judge(cond: Peers, members: Sequence[Series], e: float) -> list[Verdict | None]:
    """Each member's verdict at instant `e` (None: it has no sample at or before `e`)."""
    out: list[Verdict | None] = []
    tests: list[bool] = []
    if cond.silent:
        active = 0
        for s in members:
            hi = bisect_right(s.times, e, s.start)
            if hi <= s.start:
                out.append(None)
                tests.append(False)
                continue
            last = s.times[hi - 1]
            quiet = last + cond.span <= e
            active += not quiet
            tests.append(quiet)
            out.append(Verdict(False, s.values[hi - 1], s.step_at(hi - 1), last))
        seen = sum(v is not None for v in out)
        if seen < MIN_MEMBERS or not active:
            tests = [False] * len(out)
    else:
        values: list[float | None] = []
        for s in members:
            hi = bisect_right(s.times, e, s.start)
            if hi <= s.start:
                out.append(None)
                values.append(None)
                continue
            v = mean_at(s, e, cond.span)
            values.append(v)
            out.append(Verdict(False, math.nan if v is None else v, s.step_at(hi - 1), s.times[hi - 1]))
        finite = [v for v in values if v is not None]
        tests = [False] * len(out)
        if len(finite) >= MIN_MEMBERS:
            base = statistic(cond.stat, finite)
            if base > 0:
                compare = OPS[cond.op]
                tests = [v is not None and compare(v / base, cond.ratio) for v in values]
    if OPS[cond.count_op](sum(tests), cond.count):
        pairs = zip(out, tests, strict=True)
        return [None if v is None else Verdict(t, v.value, v.step, v.last_time) for v, t in pairs]
    return out


def instants(cond: Peers, members: Sequence[Series], after: float, before: float) -> list[float]:
    """The instants in [after, before) where the group may change: each sample's time and its time + span."""
    found: set[float] = set()
    span = cond.span
    for s in members:
        lo = bisect_left(s.times, after, s.start)
        hi = bisect_left(s.times, before, lo)
        found.update(s.times[lo:hi])
        for t in s.times[bisect_left(s.times, after, s.start, key=lambda t: t + span) :]:
            leave = t + span
            if leave >= before:
                break
            found.add(leave)
    return sorted(found)


def next_instant(cond: Peers, members: Sequence[Series], after: float) -> float | None:
    """The first instant at or after `after` where the group may change (None: none known yet)."""
    best = math.inf
    span = cond.span
    for s in members:
        k = bisect_left(s.times, after, s.start)
        if k < len(s.times):
            best = min(best, s.times[k])
        j = bisect_left(s.times, after, s.start, key=lambda t: t + span)
        if j < len(s.times):
            best = min(best, s.times[j] + span)
    return None if best == math.inf else best


@dataclass(frozen=True, slots=True)
class Group:
    """What one (peers rule, group) remembers between evaluations. Replaced, never changed."""

    members: tuple[SeriesKey, ...]
    judged: float = -math.inf
    """Every instant before this one is judged."""
    wake: float | None = None
    """The first instant not judged yet where the group may change without a new sample."""
