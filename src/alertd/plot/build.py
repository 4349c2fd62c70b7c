"""From samples and transitions to the picture of one run (`Figure`). Pure: no clock, no I/O.

Panels, in this order: the run's training loss, evaluation loss, gradient norm, learning rate,
throughput, then every other metric an alert was raised on, then the host's GPU utilisation over the
run's time range (series without a `run` label: the `nvml` source's), up to `max_panels` (panels with
alerts are always kept). Each panel holds the run's series of one metric (at most `MAX_LINES`); spans come
from the transitions of alerts on those series: pending from PENDING to FIRING (or INACTIVE), firing
from FIRING to RESOLVED, open spans to the end of the data.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Sequence

from alertd.dryrun import transition_json
from alertd.model import Sample, SeriesKey, Transition, TransitionKind
from alertd.plot.model import Figure, Line, Panel, Point, Span

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
) -> Figure:
    """The picture of run `run` of source `source`."""
    mine: dict[SeriesKey, list[Point]] = {}
    host: dict[SeriesKey, list[Point]] = {}
    for s in samples:
        key = s.series
        r = key.label("run")
        if r == run and (key.label("source") or "") == source:
            mine.setdefault(key, []).append(Point(s.time, s.step, s.value))
        elif r is None and key.metric in HOST_METRICS:
            host.setdefault(key, []).append(Point(s.time, s.step, s.value))
    times = [p.time for pts in mine.values() for p in (pts[0], pts[-1])] if mine else []
    start, end = (min(times), max(times)) if times else (0.0, 0.0)
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
    panels = tuple(_panel(*c, trs, end) for c in chosen if id(c) in picked)
    return Figure(
        title=title or f"{run} ({source})",
        run=run,
        source=source,
        start=start,
        end=end,
        panels=panels,
        transitions=tuple(transition_json(t) for t in sorted(trs, key=lambda t: t.time)),
    )


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
    return Panel(metric, tuple(lines), tuple(spans(mine, end)))


def spans(transitions: Iterable[Transition], end: float) -> list[Span]:
    """Pending and firing spans of each alert (rule + labels), from its transitions in time order."""
    open_: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, Transition]] = {}
    out: list[Span] = []

    def close(ident: tuple[str, tuple[tuple[str, str], ...]], at: float | None) -> None:
        state, t = open_.pop(ident)
        summary = dict(t.annotations).get("summary", "")
        out.append(Span(t.rule, state, t.time, at, t.step, t.severity, summary))

    for t in sorted(transitions, key=lambda t: t.time):
        ident = (t.rule, t.labels)
        if ident in open_:
            close(ident, t.time)
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
