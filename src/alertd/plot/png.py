"""A `Figure` as a PNG, drawn with matplotlib (optional: `pip install 'alertd[plot]'`).

The same picture as the SVG: one chart per panel over its axis (the training step, or seconds since the run's
first sample for time and for series without steps), pending spans amber, firing spans red, NaN and +Inf marked
at the top edge, -Inf at the bottom.
"""

from __future__ import annotations

import io
import math

from alertd.plot.model import Figure, Point
from alertd.plot.svg import PALETTE


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def figure_png(fig: Figure, *, dpi: int = 100) -> bytes:
    """The PNG bytes of `fig`; PlotUnavailable without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        from matplotlib import pyplot as plt
        from matplotlib.figure import Figure as MplFigure
    except ImportError:
        raise PlotUnavailable("a PNG needs matplotlib: pip install 'alertd[plot]' (or write .svg or .html)") from None
    del plt
    n = max(1, len(fig.panels))
    canvas = MplFigure(figsize=(9.6, 0.5 + 1.9 * n), dpi=dpi)
    same_axis = len({p.axis for p in fig.panels}) <= 1
    axes = canvas.subplots(n, 1, sharex=same_axis, squeeze=False)[:, 0]
    canvas.suptitle(fig.title, x=0.07, ha="left", fontsize=11)
    t0 = fig.start
    for ax, panel in zip(axes, fig.panels, strict=False):
        by_step = panel.axis == "step"
        ax.set_title(panel.title, loc="left", fontsize=9)

        def at(p: Point, by_step: bool = by_step) -> float:
            return float(p.step) if by_step and p.step is not None else p.time - t0

        last = float(fig.last_step or 0) if by_step else fig.end - t0
        for s in panel.spans:
            start = float(s.step) if by_step and s.step is not None else s.start - t0
            end = last if s.end is None else (float(s.end_step) if by_step and s.end_step is not None else s.end - t0)
            ax.axvspan(start, max(end, start), color="#dc2626" if s.state == "firing" else "#f59e0b", alpha=0.2, lw=0)
        for r in fig.recoveries if by_step else ():  # a dry run's recovery plans: skipped updates, checkpoint
            if r.skip is not None:
                ax.axvspan(r.skip[0] - 0.5, r.skip[1] + 0.5, color="#7c3aed", alpha=0.16, lw=0)
            ax.axvline(r.checkpoint_step, color="#7c3aed", lw=1.5, ls="--")
            ax.annotate(
                f"attempt {r.attempt}: back to {r.checkpoint_step}",
                (r.checkpoint_step, 0.9),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="#5b21b6",
                xytext=(3, 0),
                textcoords="offset points",
            )
        for i, line in enumerate(panel.lines):
            color = PALETTE[i % len(PALETTE)]
            xs = [at(p) for p in line.points]
            ys = [p.value if math.isfinite(p.value) else math.nan for p in line.points]
            ax.plot(xs, ys, color=color, lw=1.2, label=line.label[:48])
            bad = [(at(p), p.value) for p in line.points if not math.isfinite(p.value)]
            for x, v in bad[:200]:
                y, marker = (0.04, "v") if v == -math.inf else (0.96, "x" if math.isnan(v) else "^")
                ax.plot([x], [y], marker=marker, color="#b91c1c", transform=ax.get_xaxis_transform(), ms=6)
        if panel.lines:
            ax.legend(loc="upper right", fontsize=7, frameon=False)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if not same_axis or ax is axes[-1]:
            ax.set_xlabel("step" if by_step else "seconds since the run's first sample", fontsize=8)
    canvas.tight_layout()
    buf = io.BytesIO()
    canvas.savefig(buf, format="png")
    return buf.getvalue()
