"""`plateau`: Lightning's `EarlyStopping` as a condition, true where it would stop training.

Lightning (`lightning/pytorch/callbacks/early_stopping.py`) keeps `best` (+inf for mode min, -inf for
max) and `wait`; each value `v` is an improvement when `v + min_delta < best` (min) or
`v - min_delta > best` (max), strictly: then `best = v, wait = 0`; otherwise `wait += 1`, and training
stops once `wait >= patience`. This condition runs the same machine over the series' samples and is
true at every sample from the one where Lightning stops until the next improvement.

Non-finite values are no improvement (`wait += 1`), as Lightning's with `check_finite=False` (which
takes -Inf as a new best in mode min; alertd never does); with Lightning's default `check_finite=True`
a NaN stops training at once: pair `plateau` with `nonfinite` for that.

What it sees: the samples of the series' current generation in order, from the oldest one the buffer
held when this condition first judged the series (in the service: the series' first sample). The
running `best`/`wait` are advanced sample by sample (a cache, see `rules/memo.py`); when they must be
rebuilt (alertd restarted with an empty buffer, a checkpoint restart that rewound the series, the
rules reloaded), they are rebuilt from the oldest sample the buffer still holds, so after
`buffer.max_samples` samples (or `max_age`) a rebuilt state forgets a best older than that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from alertd.buffer import Series
from alertd.rules.memo import Memo


@dataclass(frozen=True, slots=True)
class Plateau:
    """`{plateau: {patience: 5, min_delta: 0.001, mode: min}}`."""

    patience: int
    min_delta: float = 0.0
    mode: Literal["min", "max"] = "min"
    memo: Memo = field(default_factory=Memo, compare=False, hash=False, repr=False)

    def check(self, series: Series, i: int) -> bool:
        """True when `patience` values in a row have not improved on the best (Lightning would stop)."""
        base = series.base
        pos = base + i - series.start
        memo = series.memo
        state = memo.get(self.memo.token) if memo is not None else None  # `Memo.get`, inline: asked at every sample
        if state is None or state[0] > pos + 1:
            # [next position, best, wait]: from the oldest buffered sample
            state = [base, math.inf if self.mode == "min" else -math.inf, 0]
            self.memo.put(series, state)
        nxt: int = state[0]
        best: float = state[1]
        wait: int = state[2]
        if nxt == pos and nxt > base:  # the one sample after the last judged: the service's tick
            v = series.values[i]
            if v - v == 0.0 and (v + self.min_delta < best if self.mode == "min" else v - self.min_delta > best):
                state[0], state[1], state[2] = pos + 1, v, 0
                return self.patience <= 0
            state[0], state[2] = pos + 1, wait + 1
            return wait + 1 >= self.patience
        values, off, delta, low = series.values, series.start - base, self.min_delta, self.mode == "min"
        for p in range(nxt if nxt > base else base, pos + 1):
            v = values[p + off]
            if v - v == 0.0 and (v + delta < best if low else v - delta > best):
                best, wait = v, 0
            else:
                wait += 1
        state[0], state[1], state[2] = nxt if nxt > pos + 1 else pos + 1, best, wait
        return wait >= self.patience

    def describe(self) -> str:
        """`plateau (mode min, patience 5, min_delta 0.001)`."""
        return f"plateau (mode {self.mode}, patience {self.patience}, min_delta {self.min_delta:g})"
