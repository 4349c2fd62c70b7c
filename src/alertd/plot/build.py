"""From samples and transitions to the picture of one run (`Figure`). Pure: no clock, no I/O.

The x axis is the training step by default (a log read in one go has one arrival time for all its lines), or
time on request; a panel whose series have no steps (the GPUs') is drawn over time either way. The time range
is the run's own samples' (not the derived `run.*` series, which alertd writes when it notices an end), so an
ended run's axis ends at its last sample.

Panels, in this order: the run's training loss, evaluation loss, gradient norm, learning rate,
throughput, then every other metric an alert was raised on, then the host's GPU utilisation over the
run's time range (series without a `run` label: the `nvml` source's), up to `max_panels` (panels with
alerts are always kept). Each panel holds the run's series of one metric (at most `MAX_LINES`); spans come
from the transitions of alerts on those series: pending from PENDING to FIRING (or INACTIVE), firing
from FIRING to RESOLVED, open spans to the end of the data.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from alertd.dryrun import transition_json
from alertd.model import Sample, SeriesKey, Transition, TransitionKind
from alertd.plot.model import Figure, Line, Panel, Point, Recovery, Span
from alertd.runs.recovery_replay import Replayed

MAX_LINES = 8
"""Series drawn per panel at most."""
KEY_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("loss", "train/loss", "train_loss", "train_loss_step", "train/loss_step", "*train*loss*")),
    ("eval loss", ("eval/loss", "eval_loss", "val/loss", "val_loss", "valid/loss", "validation/loss", "val*ppl*")),
    ("grad norm", ("*grad_norm*", "*grad_2.0_norm*", "*gradient_norm*")),
    ("learning rate", ("lr", "*/lr", "lr-*", "*learning_rate*", "*/lr_*")),
    ("throughput", ("*tokens_per_s*", "*tokens_per_sec*", "*tok_per_sec*", "*samples_per_second*", "*throughput*")),
)
"""Panel kinds and the metric names (globs) that fill them, as the default rules name them."""
AXES = ("step", "time")
"""The x axes a figure can be drawn over."""
DERIVED = ("run.", "slurm.job.")
"""Metric prefixes of the series alertd derives about a run's life: not the run's own data, so not its range."""
HOST_METRICS = ("gpu.utilization",)
"""Host-wide series (no `run` label) drawn over the run's time range."""
_KEY = [re.compile(fnmatch.translate(p)) for _, pats in KEY_METRICS for p in pats]
"""Each glob of KEY_METRICS, in order: the first glob's metrics are drawn first."""


def runs_in(samples: Iterable[Sample]) -> list[tuple[str, str]]:
    """Every (source, run) of the samples, in order of first appearance; derived series are not runs."""
    seen: dict[tuple[str, str], None] = {}
    for s in samples:
        run = s.series.label("run")
        if run is not None:
            seen.setdefault((s.series.label("source") or "", run), None)
    return list(seen)


def figure(
    samples: Iterable[Sample],
    transitions: Iterable[Transition],
    source: str,
    run: str,
    *,
    max_panels: int = 8,
    title: str = "",
    x: str = "step",
    recoveries: Iterable[Replayed] = (),
) -> Figure:
    """The picture of run `run` of source `source`, over `x` (`step` or `time`); `recoveries`: a dry run's, whose
    plans for this run are drawn (the checkpoint gone back to, the updates skipped)."""
    if x not in AXES:
        raise ValueError(f"x must be step or time, got {x!r}")
    mine: dict[SeriesKey, list[Point]] = {}
    host: dict[SeriesKey, list[Point]] = {}
    for s in samples:
        key = s.series
        r = key.label("run")
        if r == run and (key.label("source") or "") == source:
            mine.setdefault(key, []).append(Point(s.time, s.step, s.value))
        elif r is None and key.metric in HOST_METRICS:
            host.setdefault(key, []).append(Point(s.time, s.step, s.value))
    own = [pts for key, pts in mine.items() if not key.metric.startswith(DERIVED)] or list(mine.values())
    times = [p.time for pts in own for p in pts]
    start, end = (min(times), max(times)) if times else (0.0, 0.0)
    steps = sorted((p.time, p.step) for pts in own for p in pts if p.step is not None)
    trs = [t for t in transitions if _concerns(t, source, run)]
    alerted = {dict(t.labels).get("metric", "") for t in trs}

    by_metric: dict[str, list[SeriesKey]] = {}
    for key in sorted(mine, key=lambda k: (k.metric, k.labels)):
        by_metric.setdefault(key.metric, []).append(key)
    chosen: list[tuple[str, list[SeriesKey], dict[SeriesKey, list[Point]]]] = []
    for pattern in _KEY:
        for metric in sorted(by_metric):
            if pattern.match(metric) and metric not in {c[0] for c in chosen}:
                chosen.append((metric, by_metric[metric], mine))
    for metric in sorted(alerted):
        if metric in by_metric and metric not in {c[0] for c in chosen}:
            chosen.append((metric, by_metric[metric], mine))
    host_keys: dict[str, list[SeriesKey]] = {}
    for key in sorted(host, key=lambda k: (k.metric, k.labels)):
        host_keys.setdefault(key.metric, []).append(key)
    for metric, keys in host_keys.items():
        chosen.append((metric, keys, {k: [p for p in host[k] if start <= p.time <= end] for k in keys}))
    keep = [c for c in chosen if c[0] in alerted]
    rest = [c for c in chosen if c[0] not in alerted]
    budget = max(0, max_panels - len(keep))
    picked = {id(c) for c in keep + rest[:budget]}
    panels = tuple(_panel(*c, trs, end, x, steps) for c in chosen if id(c) in picked)
    return Figure(
        title=title or f"{run} ({source})",
        run=run,
        source=source,
        start=start,
        end=end,
        panels=panels,
        transitions=tuple(transition_json(t) for t in sorted(trs, key=lambda t: t.time)),
        x=x,
        first_step=min(s for _, s in steps) if steps else None,
        last_step=max(s for _, s in steps) if steps else None,
        recoveries=tuple(
            Recovery(r.notifier, r.rule, p.attempt, p.checkpoint_step, p.skip, p.describe())
            for r in recoveries
            if (p := r.plan) is not None and (r.source, r.run) == (source, run)
        ),
    )


def step_at(steps: Sequence[tuple[float, int]], t: float) -> int | None:
    """The step of the newest sample at or before `t` (the first one's before it), from (time, step) pairs in
    time order; None without any."""
    if not steps:
        return None
    i = bisect.bisect_right(steps, (t, math.inf)) - 1
    return steps[max(i, 0)][1]


def _concerns(t: Transition, source: str, run: str) -> bool:
    labels = dict(t.labels)
    if labels.get("run") == run and labels.get("source", "") == source:
        return True
    return "run" not in labels and labels.get("metric") in HOST_METRICS


def _panel(
    metric: str,
    keys: Sequence[SeriesKey],
    points: dict[SeriesKey, list[Point]],
    transitions: list[Transition],
    end: float,
    x: str = "time",
    steps: Sequence[tuple[float, int]] = (),
) -> Panel:
    keys = list(keys)[:MAX_LINES]
    common = set.intersection(*(set(k.labels) for k in keys)) if keys else set()
    lines = []
    for k in keys:
        extra = [f"{n}={v}" for n, v in k.labels if (n, v) not in common]
        lines.append(Line(metric + (" " + " ".join(extra) if extra else ""), tuple(points[k])))
    label_sets = {dict(k.labels).get("gpu") for k in keys}
    mine = [t for t in transitions if dict(t.labels).get("metric") == metric]
    if metric in HOST_METRICS:
        mine = [t for t in mine if dict(t.labels).get("gpu") in label_sets]
    stepped = any(line.points for line in lines) and all(p.step is not None for ln in lines for p in ln.points)
    axis = "step" if x == "step" and stepped and steps else "time"
    found = spans(mine, end)
    if axis == "step":  # where a transition has no step (a time-based change), the run's step at that time
        found = [
            replace(
                s,
                step=s.step if s.step is not None else step_at(steps, s.start),
                end_step=s.end_step if s.end_step is not None or s.end is None else step_at(steps, s.end),
            )
            for s in found
        ]
    return Panel(metric, tuple(lines), tuple(found), axis)


def spans(transitions: Iterable[Transition], end: float) -> list[Span]:
    """Pending and firing spans of each alert (rule + labels), from its transitions in time order."""
    open_: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, Transition]] = {}
    out: list[Span] = []

    def close(ident: tuple[str, tuple[tuple[str, str], ...]], by: Transition | None) -> None:
        state, t = open_.pop(ident)
        summary = dict(t.annotations).get("summary", "")
        at, at_step = (by.time, by.step) if by is not None else (None, None)
        out.append(Span(t.rule, state, t.time, at, t.step, t.severity, summary, at_step))

    for t in sorted(transitions, key=lambda t: t.time):
        ident = (t.rule, t.labels)
        if ident in open_:
            close(ident, t)
        if t.state is TransitionKind.PENDING:
            open_[ident] = ("pending", t)
        elif t.state is TransitionKind.FIRING:
            open_[ident] = ("firing", t)
    for ident in list(open_):
        close(ident, None)
    return sorted(out, key=lambda s: (s.start, s.rule))


def finite_range(values: Iterable[float]) -> tuple[float, float] | None:
    """The smallest and largest finite value, or None without one."""
    lo, hi = math.inf, -math.inf
    for v in values:
        if math.isfinite(v):
            lo, hi = min(lo, v), max(hi, v)
    return (lo, hi) if lo <= hi else None
