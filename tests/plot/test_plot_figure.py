"""Pictures of runs: which panels, which spans, and the SVG, HTML and PNG drawn from them."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from alertd.model import Sample, SeriesKey, Transition, TransitionKind, make_labels
from alertd.plot.build import figure, runs_in, spans
from alertd.plot.output import PlotError, pick_run, plot_format, render
from alertd.plot.page import figure_page
from alertd.plot.png import figure_png
from alertd.plot.svg import figure_svg

SVG = "{http://www.w3.org/2000/svg}"
RUN = make_labels({"source": "tb", "run": "exp1"})
T0 = 1_780_000_000.0


def series(
    metric: str, values: list[float], labels: tuple[tuple[str, str], ...] = RUN, dt: float = 2.0
) -> list[Sample]:
    return [Sample(SeriesKey(metric, labels), T0 + i * dt, i, v) for i, v in enumerate(values)]


def tr(rule: str, state: TransitionKind, t: float, metric: str, step: int | None = None) -> Transition:
    labels = make_labels({**dict(RUN), "metric": metric})
    return Transition(rule, state, t, step, 1.0, labels, "critical", (("summary", f"{rule} <b>"),), t)


def test_panels_come_in_the_order_people_look_for_and_alerted_metrics_are_always_drawn() -> None:
    samples = (
        series("train/learning_rate", [1e-4] * 5)
        + series("train/loss", [3, 2, 1, 0.5, 0.4])
        + series("zz/custom", [1, 2, 3, 4, 5])
        + series("train/grad_norm", [1, 1, 1, 1, 1])
        + series("gpu.utilization", [90] * 10, make_labels({"source": "gpu", "gpu": "0", "host": "h"}), dt=1.0)
        + series("train/loss", [9] * 3, make_labels({"source": "tb", "run": "other"}))
    )
    trs = [tr("custom_high", TransitionKind.FIRING, T0 + 4, "zz/custom", 2)]
    fig = figure(samples, trs, "tb", "exp1")
    assert [p.title for p in fig.panels] == [
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "zz/custom",
        "gpu.utilization",
    ]
    assert len(fig.panels[0].lines[0].points) == 5  # the other run's loss is not drawn here
    assert [p.time for p in fig.panels[-1].lines[0].points] == [T0 + i for i in range(9)]  # clipped to the run
    small = figure(samples, trs, "tb", "exp1", max_panels=1)
    assert [p.title for p in small.panels] == ["zz/custom"]  # the alerted panel is kept first
    assert runs_in(samples) == [("tb", "exp1"), ("tb", "other")]


def test_spans_pair_pending_firing_and_resolved_and_stay_open_to_the_end() -> None:
    trs = [
        tr("slow", TransitionKind.PENDING, 10.0, "m", 1),
        tr("slow", TransitionKind.FIRING, 20.0, "m", 3),
        tr("slow", TransitionKind.RESOLVED, 30.0, "m", 5),
        tr("flap", TransitionKind.PENDING, 12.0, "m", 2),
        tr("flap", TransitionKind.INACTIVE, 14.0, "m", 2),
        tr("nan", TransitionKind.FIRING, 40.0, "m", 7),
    ]
    got = [(s.rule, s.state, s.start, s.end, s.step) for s in spans(trs, 50.0)]
    assert got == [
        ("slow", "pending", 10.0, 20.0, 1),
        ("flap", "pending", 12.0, 14.0, 2),
        ("slow", "firing", 20.0, 30.0, 3),
        ("nan", "firing", 40.0, None, 7),
    ]


def test_the_svg_marks_nonfinite_values_shades_spans_and_escapes_everything() -> None:
    hostile = make_labels({"source": "tb", "run": '<script>alert("x")</script>'})
    samples = series("train/loss", [1.0, math.nan, 2.0, math.inf, -math.inf, 1.5], hostile)
    labels = make_labels({**dict(hostile), "metric": "train/loss"})
    trs = [Transition("loss_not_finite", TransitionKind.FIRING, T0 + 2, 1, math.nan, labels, "critical", (), T0 + 2)]
    svg = figure_svg(figure(samples, trs, "tb", dict(hostile)["run"]))
    assert "<script" not in svg
    root = ET.fromstring(svg)  # well-formed
    marks = [(g.get("data-kind"), g.get("data-step")) for g in root.iter(f"{SVG}g") if g.get("class") == "nonfinite"]
    assert marks == [("NaN", "1"), ("+Inf", "3"), ("-Inf", "4")]
    (span,) = [r for r in root.iter(f"{SVG}rect") if (r.get("class") or "").startswith("span")]
    assert (span.get("class"), span.get("data-rule"), span.get("data-step"), span.get("data-end")) == (
        "span firing",
        "loss_not_finite",
        "1",
        "",
    )
    (path,) = [p for p in root.iter(f"{SVG}path") if p.get("class") == "line"]
    assert path.get("d", "").count("M") == 3  # the line breaks at the NaN and again at the infinities
    assert len([c for c in root.iter(f"{SVG}circle") if c.get("class") == "dot"]) == 3  # lone points show
    assert path.get("data-points") == "6"


def test_a_million_points_make_a_bounded_drawing_that_keeps_the_spike() -> None:
    values = [1.0] * 1_000_000
    values[654_321] = 500.0
    fig = figure(series("train/loss", values, dt=0.01), [], "tb", "exp1")
    svg = figure_svg(fig)
    assert len(svg) < 200_000
    root = ET.fromstring(svg)
    (path,) = [p for p in root.iter(f"{SVG}path") if p.get("class") == "line"]
    ys = [float(seg.split()[1]) for seg in path.get("d", "").replace("M", "L").split("L") if seg.strip()]
    assert min(ys) < max(ys) - 100  # the one high value is still drawn


def test_html_page_png_and_the_choice_of_run() -> None:
    samples = series("train/loss", [1, 2, math.nan]) + series("loss", [1], make_labels({"source": "s", "run": "b"}))
    trs = [tr("loss_not_finite", TransitionKind.FIRING, T0 + 4, "train/loss", 2)]
    html = figure_page(figure(samples, trs, "tb", "exp1"))
    assert html.startswith("<!doctype html>") and "<svg" in html and "loss_not_finite &lt;b&gt;" in html
    assert "<script" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    png = figure_png(figure(samples, trs, "tb", "exp1"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert pick_run(samples, trs, None) == (("tb", "exp1"), pick_run(samples, trs, None)[1])
    assert "of 2 runs" in pick_run(samples, trs, None)[1]
    assert pick_run(samples, trs, "b") == (("s", "b"), "")
    assert pick_run(samples, trs, "s:b") == (("s", "b"), "")
    with pytest.raises(PlotError, match=r"no such run in the data \(runs: exp1, b\)"):
        pick_run(samples, trs, "nope")
    with pytest.raises(PlotError, match=r"ending in \.html, \.svg or \.png"):
        plot_format("out.pdf")
    body, note = render(samples, trs, "x.svg", "exp1")
    assert body.startswith(b"<svg") and note == ""


def test_a_log_read_at_once_is_drawn_over_its_steps_and_an_ended_run_ends_at_its_last_sample() -> None:
    at_once = [Sample(SeriesKey("loss", RUN), T0, i * 10, 3.0 - i / 10) for i in range(10)]  # one arrival time
    ended = [Sample(SeriesKey("run.stalled", RUN), T0 + 600, 90, 1.0)]  # alertd's own note, 10 minutes on
    gpu_key = SeriesKey("gpu.utilization", make_labels({"source": "gpu", "gpu": "0", "host": "h"}))
    gpu = [Sample(gpu_key, T0, None, 90.0)]  # NVML has no steps
    nan = tr("loss_not_finite", TransitionKind.FIRING, T0, "loss", 50)
    fig = figure(at_once + ended + gpu, [nan], "tb", "exp1")
    assert (fig.x, fig.first_step, fig.last_step, fig.start, fig.end) == ("step", 0, 90, T0, T0)
    assert [(p.title, p.axis) for p in fig.panels] == [("loss", "step"), ("gpu.utilization", "time")]
    root = ET.fromstring(figure_svg(fig))
    loss = next(g for g in root.iter(f"{SVG}g") if g.get("data-metric") == "loss")
    (path,) = [p for p in loss.iter(f"{SVG}path") if p.get("class") == "line"]
    xs = [float(part.split()[0][1:]) for part in re.findall(r"[ML][0-9.]+ [0-9.]+", path.get("d") or "")]
    assert len(set(xs)) == 10 and xs == sorted(xs)  # ten steps side by side, not one vertical line
    (span,) = [r for r in loss.iter(f"{SVG}rect") if (r.get("class") or "").startswith("span")]
    assert float(span.get("x") or 0) == pytest.approx(xs[5], abs=0.2)  # the alert at step 50, where step 50 is
    by_time = figure(at_once + ended, [nan], "tb", "exp1", x="time")
    assert [p.axis for p in by_time.panels] == ["time"] and by_time.end == T0  # not the derived sample's time
    with pytest.raises(ValueError):
        figure(at_once, [], "tb", "exp1", x="wall")
