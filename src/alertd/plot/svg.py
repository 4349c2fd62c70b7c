"""A `Figure` as one SVG document: stacked line charts, alert spans shaded, NaN/Inf marked. Pure.

Each panel's x axis is its `axis`: the training step (ticks at round steps, captioned `step`) or the time since
the run's first sample (captioned `time`); its `<g class="panel">` says which in `data-axis`.

Text and attributes are escaped; nothing from the data is ever markup. Lines are bounded: a series with
more points than twice the plot's pixel width is drawn from each pixel column's first, lowest, highest
and last finite values (the shape survives); a NaN or ±Inf breaks the line and gets a marker at the
panel's edge (NaN and +Inf at the top, -Inf at the bottom), at most `MAX_MARKERS` per line. Every mark
carries `data-*` attributes (time, step, state, rule) so a page or a test can read what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from alertd.model import format_time
from alertd.plot.build import finite_range
from alertd.plot.model import Figure, Line, Panel, Point, Recovery, Span

WIDTH = 960
PANEL_HEIGHT = 150
LEFT, RIGHT = 64, 16
HEADER = 34
TITLE_ROW = 22
AXIS_ROW = 22
GAP = 10
MAX_MARKERS = 200
Scale = Callable[[float], float]
PALETTE = ("#2563eb", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d", "#475569")
STYLE = """
.bg{fill:#fff}.frame{fill:none;stroke:#cbd5e1}.grid{stroke:#eef2f7}.tick{font:11px system-ui,sans-serif;fill:#475569}
.title{font:600 13px system-ui,sans-serif;fill:#0f172a}.head{font:600 15px system-ui,sans-serif;fill:#0f172a}
.sub{font:12px system-ui,sans-serif;fill:#475569}.legend{font:12px system-ui,sans-serif;fill:#334155}
.line{fill:none;stroke-width:1.6;stroke-linejoin:round}.pending{fill:#f59e0b;fill-opacity:.22}
.firing{fill:#dc2626;fill-opacity:.2}.nonfinite{stroke:#b91c1c;stroke-width:2;fill:#b91c1c}
.empty{font:italic 12px system-ui,sans-serif;fill:#64748b}
.recovery-skip{fill:#7c3aed;fill-opacity:.16}.recovery-checkpoint{stroke:#7c3aed;stroke-width:2;stroke-dasharray:5 3}
.recovery-label{font:11px system-ui,sans-serif;fill:#5b21b6}
"""
_TIME_STEPS = (
    *(1, 2, 5, 10, 15, 30),
    *(60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200),
    *(86400, 172800, 604800),
)


def figure_svg(fig: Figure, *, width: int = WIDTH, panel_height: int = PANEL_HEIGHT) -> str:
    """The whole figure: a header (run, time range), then one chart per panel, sharing the time axis."""
    block = TITLE_ROW + panel_height + AXIS_ROW + GAP
    height = HEADER + max(1, len(fig.panels)) * block
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{_a(f"charts of run {fig.title}")}" class="alertd-figure" '
        f'data-run="{_a(fig.run)}" data-source="{_a(fig.source)}">',
        f"<title>{_t(fig.title)}</title><style>{STYLE}</style>",
        f'<rect class="bg" x="0" y="0" width="{width}" height="{height}"/>',
        f'<text class="head" x="{LEFT}" y="20">{_t(fig.title)}</text>',
    ]
    if fig.end > fig.start:
        span = f"{format_time(fig.start)} to {format_time(fig.end)} ({_duration(fig.end - fig.start)})"
        if any(p.axis == "step" for p in fig.panels):
            span = f"steps {fig.first_step} to {fig.last_step}, {span}"
        out.append(f'<text class="sub" x="{width - RIGHT}" y="20" text-anchor="end">{_t(span)}</text>')
    if not fig.panels:
        out.append(f'<text class="empty" x="{LEFT}" y="{HEADER + 30}">no samples for this run</text>')
    for i, panel in enumerate(fig.panels):
        out.append(_panel(fig, panel, HEADER + i * block, width, panel_height))
    out.append("</svg>")
    return "\n".join(out)


def _panel(fig: Figure, panel: Panel, top: int, width: int, height: int) -> str:
    x0, x1 = LEFT, width - RIGHT
    y0, y1 = top + TITLE_ROW, top + TITLE_ROW + height
    by_step = panel.axis == "step" and fig.first_step is not None and fig.last_step is not None
    if by_step:
        t0, last = float(fig.first_step or 0), float(fig.last_step or 0)
    else:
        t0, last = fig.start, fig.end
    t1 = last + (last - t0) * 0.02 if last > t0 else t0 + 1.0  # the last point off the frame
    yr = finite_range(p.value for line in panel.lines for p in line.points)
    lo, hi = _padded(yr)

    def x(t: float) -> float:
        return x0 + (t - t0) / (t1 - t0) * (x1 - x0)

    def at(p: Point) -> float:
        """Where a point lies on this panel's axis."""
        return float(p.step) if by_step and p.step is not None else p.time

    def y(v: float) -> float:
        return y1 - (v - lo) / (hi - lo) * (y1 - y0)

    axis = "step" if by_step else "time"
    out = [f'<g class="panel" data-metric="{_a(panel.title)}" data-axis="{axis}">']
    out.append(f'<text class="title" x="{x0}" y="{top + 15}">{_t(panel.title)}</text>')
    lx = x1
    for i, line in reversed(list(enumerate(panel.lines))):
        color = PALETTE[i % len(PALETTE)]
        label = line.label if len(line.label) <= 48 else line.label[:47] + "…"
        lx -= 18 + 7 * len(label)
        out.append(
            f'<rect x="{lx:.0f}" y="{top + 6}" width="10" height="10" fill="{color}"/>'
            f'<text class="legend" x="{lx + 14:.0f}" y="{top + 15}">{_t(label)}</text>'
        )
    out.append(f'<rect class="frame" x="{x0}" y="{y0}" width="{x1 - x0}" height="{height}"/>')
    for v in _nice_ticks(lo, hi):
        yy = y(v)
        out.append(
            f'<line class="grid" x1="{x0}" x2="{x1}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
            f'<text class="tick" x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">{_num(v)}</text>'
        )
    ticks = (
        [(v, _num(v)) for v in _step_ticks(t0, t1)]
        if by_step
        else [(t, f"+{_duration(t - t0)}") for t in _time_ticks(t0, t1)]
    )
    for t, text in ticks:
        xx = x(t)
        if xx > x1 - 48:  # its label would run into the axis' caption
            continue
        out.append(
            f'<line class="grid" x1="{xx:.1f}" x2="{xx:.1f}" y1="{y0}" y2="{y1}"/>'
            f'<text class="tick" x="{xx:.1f}" y="{y1 + 15}" text-anchor="middle">{_t(text)}</text>'
        )
    out.append(f'<text class="tick axis" x="{x1}" y="{y1 + 15}" text-anchor="end">{axis}</text>')
    for s in panel.spans:
        start = float(s.step) if by_step and s.step is not None else s.start
        end = None if s.end is None else (float(s.end_step) if by_step and s.end_step is not None else s.end)
        out.append(_span(s, x, start, end, t1, y0, height))
    if by_step:
        out += [_recovery(r, x, y0, height) for r in fig.recoveries]
    for i, line in enumerate(panel.lines):
        out.append(_line(line, PALETTE[i % len(PALETTE)], x, y, y0, y1, x1 - x0, at))
    if yr is None and not any(line.points for line in panel.lines):
        out.append(f'<text class="empty" x="{x0 + 8}" y="{y0 + 20}">no samples</text>')
    out.append("</g>")
    return "".join(out)


def _span(s: Span, x: Scale, start: float, end: float | None, data_end: float, y0: int, height: int) -> str:
    """The span's shaded band from `start` to `end` on the panel's axis (open: to the end of the data)."""
    end = end if end is not None else data_end
    a, b = x(start), x(max(end, start))
    w = max(b - a, 2.0)
    step = "" if s.step is None else str(s.step)
    until = "the end of the data" if s.end is None else format_time(s.end)
    tip = f"{s.rule} {s.state} from {format_time(s.start)}" + (f" (step {step})" if step else "") + f" to {until}"
    if s.summary:
        tip += f": {s.summary}"
    return (
        f'<rect class="span {s.state}" x="{a:.1f}" y="{y0}" width="{w:.1f}" height="{height}" '
        f'data-rule="{_a(s.rule)}" data-state="{s.state}" data-start="{s.start!r}" '
        f'data-end="{"" if s.end is None else repr(s.end)}" data-step="{step}" data-severity="{_a(s.severity)}">'
        f"<title>{_t(tip)}</title></rect>"
    )


def _recovery(r: Recovery, x: Scale, y0: int, height: int) -> str:
    """A dry run's recovery plan: the skipped updates shaded, a dashed line at the checkpoint gone back to,
    labelled."""
    skip = "" if r.skip is None else f"{r.skip[0]}-{r.skip[1]}"
    out = [
        f'<g class="recovery" data-notifier="{_a(r.notifier)}" data-rule="{_a(r.rule)}" data-attempt="{r.attempt}" '
        f'data-checkpoint-step="{r.checkpoint_step}" data-skip="{skip}">',
        f"<title>{_t(f'recover {r.notifier} for {r.rule}: {r.label}')}</title>",
    ]
    if r.skip is not None:
        a, b = x(r.skip[0] - 0.5), x(r.skip[1] + 0.5)
        out.append(
            f'<rect class="recovery-skip" x="{a:.1f}" y="{y0}" width="{max(b - a, 2.0):.1f}" height="{height}" '
            f'data-from="{r.skip[0]}" data-to="{r.skip[1]}"/>'
        )
    xx = x(r.checkpoint_step)
    out.append(
        f'<line class="recovery-checkpoint" x1="{xx:.1f}" x2="{xx:.1f}" y1="{y0}" y2="{y0 + height}" '
        f'data-step="{r.checkpoint_step}"/>'
    )
    text = f"attempt {r.attempt}: back to {r.checkpoint_step}" + (
        f", skip {r.skip[0]}-{r.skip[1]}" if r.skip is not None else ""
    )
    out.append(
        f'<text class="recovery-label" x="{xx + 4:.1f}" y="{y0 + 12 + 12 * ((r.attempt - 2) % 3)}">{_t(text)}</text>'
    )
    out.append("</g>")
    return "".join(out)


def _line(
    line: Line, color: str, x: Scale, y: Scale, top: int, bottom: int, pixels: float, at: Callable[[Point], float]
) -> str:
    pts = _thin(line.points, max(64, int(pixels * 2)))
    parts: list[str] = []
    pen_down = False
    markers: list[str] = []
    hidden = 0
    for p in pts:
        if math.isfinite(p.value):
            parts.append(f"{'L' if pen_down else 'M'}{x(at(p)):.1f} {y(p.value):.1f}")
            pen_down = True
            continue
        pen_down = False
    for p in line.points:
        if math.isfinite(p.value):
            continue
        if len(markers) >= MAX_MARKERS:
            hidden += 1
            continue
        markers.append(_marker(p, x(at(p)), top, bottom))
    d = " ".join(parts)
    out = [
        f'<path class="line" stroke="{color}" d="{d}" data-label="{_a(line.label)}" data-points="{len(line.points)}"/>'
    ]
    for i, part in enumerate(parts):  # a finite point alone between gaps: a dot, so it shows
        if part[0] == "M" and (i + 1 == len(parts) or parts[i + 1][0] == "M"):
            xx, yy = part[1:].split()
            out.append(f'<circle class="dot" cx="{xx}" cy="{yy}" r="2.5" fill="{color}"/>')
    out += markers
    if hidden:
        out.append(f'<text class="tick" x="{x(at(line.points[-1])):.1f}" y="{top + 24}">+{hidden} more</text>')
    return "".join(out)


def _marker(p: Point, xx: float, top: int, bottom: int) -> str:
    kind = "NaN" if math.isnan(p.value) else ("+Inf" if p.value > 0 else "-Inf")
    step = "" if p.step is None else str(p.step)
    tip = f"{kind} at {format_time(p.time)}" + (f", step {step}" if step else "")
    if kind == "-Inf":
        shape = f'<path d="M{xx - 5:.1f} {bottom - 10} L{xx + 5:.1f} {bottom - 10} L{xx:.1f} {bottom - 2} Z"/>'
    elif kind == "+Inf":
        shape = f'<path d="M{xx - 5:.1f} {top + 10} L{xx + 5:.1f} {top + 10} L{xx:.1f} {top + 2} Z"/>'
    else:
        a, b = f"{xx - 4:.1f}", f"{xx + 4:.1f}"
        shape = f'<path d="M{a} {top + 3} L{b} {top + 11} M{b} {top + 3} L{a} {top + 11}"/>'
    return (
        f'<g class="nonfinite" data-kind="{kind}" data-time="{p.time!r}" data-step="{step}">'
        f"<title>{_t(tip)}</title>{shape}</g>"
    )


def _thin(points: Sequence[Point], budget: int) -> Sequence[Point]:
    """At most ~4 points per bucket of `len/budget*4` (first, min, max, last, in time order); non-finite
    points kept where they fall (they break the line)."""
    n = len(points)
    if n <= budget:
        return points
    size = max(1, math.ceil(n * 4 / budget))
    out: list[Point] = []
    for i in range(0, n, size):
        bucket = points[i : i + size]
        finite = [p for p in bucket if math.isfinite(p.value)]
        if len(finite) < len(bucket):
            out.extend(p for p in bucket if not math.isfinite(p.value))
        if not finite:
            continue
        picks = {id(p): p for p in (finite[0], min(finite, key=_v), max(finite, key=_v), finite[-1])}
        out.extend(sorted(picks.values(), key=lambda p: p.time))
    out.sort(key=lambda p: p.time)
    return out


def _v(p: Point) -> float:
    return p.value


def _padded(yr: tuple[float, float] | None) -> tuple[float, float]:
    if yr is None:
        return 0.0, 1.0
    lo, hi = yr
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def _nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    raw = (hi - lo) / count
    if not math.isfinite(raw) or raw <= 0:
        return []
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks: list[float] = []
    v = first
    while v <= hi and len(ticks) < 12:
        ticks.append(round(v, 12))
        v += step
    return ticks


def _step_ticks(s0: float, s1: float, count: int = 8) -> list[float]:
    """Round steps (1, 2, 2.5, 5 x 10^n, whole numbers) inside the range."""
    return [v for v in _nice_ticks(s0, s1, count) if v == int(v) and s0 <= v]


def _time_ticks(t0: float, t1: float, count: int = 8) -> list[float]:
    span = t1 - t0
    week = _TIME_STEPS[-1]
    step = next((s for s in _TIME_STEPS if span / s <= count), week * math.ceil(span / count / week))
    return [t0 + k * step for k in range(1, int(span // step) + 1) if k * step < span]


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


def _num(v: float) -> str:
    return f"{v:.4g}"


def _t(text: str) -> str:
    return escape(text, quote=False)


def _a(text: str) -> str:
    return escape(text, quote=True)
