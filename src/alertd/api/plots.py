"""`GET /api/v1/runs/plot.svg`: a live run drawn from the service's buffer, with its alert spans.

The samples are copied out of the buffer on the event loop as array slices (at most `MAX_POINTS` of each
series, the newest); making them samples and drawing run in a worker thread. Spans come from the service's
recent transitions (`Service.transition_log`) and, for alerts active since before it (a restart), from the
alerts themselves (pending from their start, firing from when they fired).
"""

from __future__ import annotations

import asyncio
import os
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias

from fastapi import APIRouter, Query
from fastapi.responses import Response

from alertd.api.view import AlertsView
from alertd.buffer import NO_STEP, SeriesBuffer
from alertd.model import Alert, AlertState, Sample, SeriesKey, Transition, TransitionKind
from alertd.plot.build import HOST_METRICS, figure
from alertd.plot.svg import figure_svg

MAX_POINTS = 20_000
"""Samples of one series drawn at most (the newest)."""
SVG_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
}


Columns: TypeAlias = "tuple[SeriesKey, array[float], array[int], array[float]]"
"""One series' newest samples, copied out of the buffer: key, times, steps, values."""


def run_columns(buffer: SeriesBuffer, source: str, run: str, max_points: int = MAX_POINTS) -> list[Columns]:
    """The buffered samples of run `run` of `source`, and of the host-wide GPU series, as copied arrays:
    the only part that must run on the event loop (the buffer changes there), and cheap (array slices)."""
    out: list[Columns] = []
    for s in buffer:
        key = s.key
        r = key.label("run")
        mine = r == run and (key.label("source") or "") == source
        if not mine and not (r is None and key.metric in HOST_METRICS):
            continue
        first = max(s.start, len(s.times) - max_points)
        out.append((key, s.times[first:], s.steps[first:], s.values[first:]))
    return out


def run_samples(columns: list[Columns]) -> list[Sample]:
    """Those columns as samples, in time order (in a worker thread: one object per sample)."""
    out = [
        Sample(key, t, None if step == NO_STEP else step, v)
        for key, times, steps, values in columns
        for t, step, v in zip(times, steps, values, strict=True)
    ]
    out.sort(key=lambda x: x.time)
    return out


def with_active(log: Iterable[Transition], alerts: Sequence[Alert]) -> list[Transition]:
    """The logged transitions, and those an active alert implies where the log no longer holds its start."""
    out = list(log)
    started = {(t.rule, t.labels) for t in out if t.state in (TransitionKind.PENDING, TransitionKind.FIRING)}
    for a in alerts:
        if (a.rule, a.labels) in started:
            continue
        common = (a.step, a.value, a.labels, a.severity, a.annotations, a.active_at)
        out.append(Transition(a.rule, TransitionKind.PENDING, a.active_at, *common))
        if a.state is AlertState.FIRING and a.fired_at is not None:
            out.append(Transition(a.rule, TransitionKind.FIRING, a.fired_at, *common))
    out.sort(key=lambda t: t.time)
    return out


def run_title(config: Any, source: str, run: str) -> str:
    """How people are shown a run: its label, except a TensorBoard logdir's root run (`.`), shown by the
    logdir's directory name, as the training callbacks name a run."""
    if run != ".":
        return run
    cfg = next((s for s in config.sources if s.name == source), None)
    logdir = getattr(cfg, "logdir", None) if cfg is not None and cfg.type == "tensorboard" else None
    name = os.path.basename(os.path.normpath(os.path.abspath(logdir))) if logdir else ""
    return name or run


def plot_routes(api: APIRouter, service: AlertsView) -> None:
    @api.get("/runs/plot.svg", response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
    async def run_plot(
        source: str = Query(..., max_length=1000, description="the run's `source` label"),
        run: str = Query(..., max_length=1000, description="the run's `run` label"),
        x: Literal["step", "time"] = Query("step", description="the x axis: the training step, or time"),
    ) -> Response:
        """The run's key series (loss, grad norm, learning rate, throughput, what alerts were raised on,
        the host's GPU utilisation) as line charts, with the spans where alerts were pending and firing
        and NaN/Inf samples marked: one SVG document. `x=step` (the default) draws them over the training
        step, `x=time` over time; series without steps (GPUs) are drawn over time either way."""
        engine = service.engine
        columns = run_columns(engine.buffer, source, run)
        alerts = engine.state.alerts(engine.ruleset.rules)
        transitions = with_active(service.transition_log, alerts)
        title = f"{run_title(service.config, source, run)} ({source})"
        svg = await asyncio.to_thread(
            lambda: figure_svg(figure(run_samples(columns), transitions, source, run, title=title, x=x))
        )
        return Response(svg, media_type="image/svg+xml", headers=SVG_HEADERS)
