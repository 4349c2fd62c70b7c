"""The step guard: skip an optimizer step whose loss or pre-clip gradient norm is not finite or an outlier.

`Guard(sigma=6, window=100)` judges each step's loss and gradient norm before the update: a value that is NaN or
infinite, or whose z-score against the `window` steps before it is above `sigma`, makes the step skipped. The
z-score is the core's (`alertd.rules.windows.ZScore`: the mean and the population standard deviation of the finite
values of the window before the judged one, judged only once the window is full and its deviation is not zero),
so a guard and a rule `{zscore: {over: 100 samples, threshold: 6, direction: up}}` agree exactly. Every value, a
skipped step's too, joins the window: a lasting change of level is skipped for a while, then taken as the new
normal. Framework-free: only the core's pure code, imported when a guard is made (it brings numpy), so that
importing the callbacks stays cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from alertd.buffer import Series
    from alertd.rules.windows import ZScore


@dataclass
class Guard:
    """Skip a step whose loss or gradient norm is not finite, or more than `sigma` standard deviations above (with
    `direction`: up, down or both) the mean of the `window` steps before it. `on`: which values are judged."""

    sigma: float = 6.0
    window: int = 100
    direction: Literal["up", "down", "both"] = "up"
    on: tuple[str, ...] = ("loss", "grad_norm")
    _series: dict[str, Series] = field(default_factory=dict, init=False, repr=False)
    _zscore: ZScore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        from alertd.buffer import BufferLimits
        from alertd.rules.windows import Span, ZScore

        if not (self.sigma > 0 and self.window >= 2):
            raise ValueError("Guard needs sigma > 0 and window >= 2")
        self._zscore = ZScore(Span(samples=self.window), self.sigma, self.direction)
        self._limits: Any = BufferLimits(max_samples=self.window + 1, max_age=math.inf)

    def judge(self, step: int, **values: float | None) -> str | None:
        """Why the step must be skipped (`loss is NaN`, `grad_norm 9.1 sigma from the last 100 steps`), or None.
        Each value given (`loss=`, `grad_norm=`; None: not known) joins its window."""
        reasons = []
        for name, value in values.items():
            if value is None or name not in self.on:
                continue
            series = self._series.get(name)
            if series is None:
                from alertd.buffer import Series
                from alertd.model import SeriesKey

                series = self._series[name] = Series(SeriesKey(f"guard/{name}"))
            series.append(float(step), step, value)
            series.evict(self._limits, 0.0)
            if not math.isfinite(value):
                reasons.append(f"{name} is {value}")
                continue
            assert self._zscore is not None
            i = len(series.times) - 1
            if self._zscore.check(series, i):
                z = self._zscore.score(series, i)
                reasons.append(f"{name} {value:.4g} is {z:.1f} sigma from the last {self.window} steps")
        return "; ".join(reasons) or None
