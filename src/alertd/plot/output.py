"""What `alertd dry-run --plot OUT` draws: which run, and in which format (from OUT's suffix). Pure: the
caller writes the bytes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from alertd.model import Sample, Transition, TransitionKind
from alertd.plot.build import figure, runs_in
from alertd.plot.page import figure_page
from alertd.plot.png import figure_png
from alertd.plot.svg import figure_svg
from alertd.runs.recovery_replay import Replayed

FORMATS = (".html", ".htm", ".svg", ".png")


class PlotError(ValueError):
    """The plot can't be made as asked (a message for the user)."""


def plot_format(path: str) -> str:
    """`.html`, `.svg` or `.png` from the file name; PlotError for anything else."""
    suffix = "." + path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FORMATS:
        raise PlotError(f"--plot {path}: give a file name ending in .html, .svg or .png")
    return ".html" if suffix == ".htm" else suffix


def pick_run(
    samples: Sequence[Sample], transitions: Sequence[Transition], wanted: str | None
) -> tuple[tuple[str, str], str]:
    """(source, run) to draw, and a note for stderr ("" when there was nothing to choose).

    `wanted` is a run label, or `SOURCE:RUN` where several sources have that run. Without it: the only
    run, else the one with the most firing alerts (the first of equals)."""
    runs = runs_in(samples)
    if not runs:
        raise PlotError("--plot: the data has no run (no series with a `run` label) to draw")
    if wanted is not None:
        hits = [r for r in runs if r[1] == wanted or f"{r[0]}:{r[1]}" == wanted]
        if not hits:
            listed = ", ".join(r[1] for r in runs[:20]) + (" ..." if len(runs) > 20 else "")
            raise PlotError(f"--run {wanted!r}: no such run in the data (runs: {listed})")
        if len(hits) > 1:
            raise PlotError(f"--run {wanted!r} is in several sources: say which, e.g. --run {hits[0][0]}:{wanted}")
        return hits[0], ""
    if len(runs) == 1:
        return runs[0], ""
    firing = Counter(
        (dict(t.labels).get("source", ""), dict(t.labels).get("run", ""))
        for t in transitions
        if t.state is TransitionKind.FIRING
    )
    best = max(runs, key=lambda r: (firing[r], -runs.index(r)))
    others = len(runs) - 1
    return best, f"note: --plot drew run {best[1]!r} ({best[0]}), of {others + 1} runs; choose another with --run"


def render(
    samples: Sequence[Sample],
    transitions: Sequence[Transition],
    path: str,
    run: str | None,
    x: str = "step",
    recoveries: Sequence[Replayed] = (),
) -> tuple[bytes, str]:
    """The file's bytes and the note for stderr; `x` is the axis, `step` or `time`; `recoveries`: the plans
    the `recover` notifiers would have made, drawn on the run's panels over the step."""
    fmt = plot_format(path)
    (source, name), note = pick_run(samples, transitions, run)
    fig = figure(samples, transitions, source, name, x=x, recoveries=recoveries)
    if fmt == ".svg":
        return figure_svg(fig).encode(), note
    if fmt == ".png":
        return figure_png(fig), note
    return figure_page(fig).encode(), note
