"""`alertd dry-run --plot OUT`: the picture of one run without a server, read back from the file it wrote."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from alertd.testing.tbwriter import ScalarWriter

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_780_000_000.0
RULES = """
rules:
  - {name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}
  - {name: grad_norm_exploding, metric: ["*grad_norm"], condition: "> 100", for: 20s, severity: warning}
"""


def alertd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120)


def logdir(tmp: Path) -> Path:
    for run, nan_at in (("exp1", 40), ("exp2", None)):
        w = ScalarWriter(tmp / "runs" / run)
        for step in range(60):
            t = T0 + step * 5
            w.add_scalar("train/loss", math.nan if step == nan_at else 2.0 - step / 100, step, wall_time=t)
            w.add_scalar("train/grad_norm", 500.0 if 10 <= step < 20 else 1.0, step, wall_time=t)
        w.flush()
    (tmp / "rules.yaml").write_text(RULES)
    return tmp / "runs"


def test_svg_shows_the_series_the_nan_and_the_spans_at_their_steps(tmp_path: Path) -> None:
    runs = logdir(tmp_path)
    out = tmp_path / "exp1.svg"
    args = ("dry-run", "--rules", str(tmp_path / "rules.yaml"), "--source", f"tensorboard:{runs}")
    done = alertd(*args, "--plot", str(out), "--run", "exp1")
    assert done.returncode == 0, done.stderr
    text_only = alertd(*args)
    assert done.stdout == text_only.stdout  # the transitions printed as without --plot
    root = ET.fromstring(out.read_text())
    assert root.get("data-run") == "exp1"
    panels = {g.get("data-metric"): g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"}
    assert list(panels) == ["train/loss", "train/grad_norm"]
    (line,) = [p for p in panels["train/loss"].iter(f"{SVG}path") if p.get("class") == "line"]
    assert line.get("data-points") == "60"
    marks = [(g.get("data-kind"), g.get("data-step")) for g in panels["train/loss"].iter(f"{SVG}g")]
    assert ("NaN", "40") in marks

    def spans(metric: str) -> list[tuple[str | None, str | None, str | None]]:
        rects = [r for r in panels[metric].iter(f"{SVG}rect") if (r.get("class") or "").startswith("span")]
        return [(r.get("data-rule"), r.get("data-state"), r.get("data-step")) for r in rects]

    assert spans("train/loss") == [("loss_not_finite", "firing", "40")]
    # for: 20s: pending from step 10, firing 20 s (4 steps) later, resolved at step 20
    assert spans("train/grad_norm") == [
        ("grad_norm_exploding", "pending", "10"),
        ("grad_norm_exploding", "firing", "14"),
    ]
    firing = next(r for r in panels["train/grad_norm"].iter(f"{SVG}rect") if r.get("data-state") == "firing")
    assert float(firing.get("data-start") or 0) == T0 + 14 * 5 and float(firing.get("data-end") or 0) == T0 + 20 * 5


def test_html_and_png_and_the_choice_of_run(tmp_path: Path) -> None:
    runs = logdir(tmp_path)
    args = ("dry-run", "--rules", str(tmp_path / "rules.yaml"), "--source", f"tensorboard:{runs}")
    html = tmp_path / "run.html"
    done = alertd(*args, "--plot", str(html))
    assert done.returncode == 0, done.stderr
    assert "note: --plot drew run 'exp1' (tensorboard), of 2 runs; choose another with --run" in done.stderr
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page
    assert re.search(r"<td>loss_not_finite</td><td>train/loss</td><td>40</td>", page)
    png = tmp_path / "run.png"
    assert alertd(*args, "--plot", str(png), "--run", "exp2").returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = alertd(*args, "--plot", str(tmp_path / "run.pdf"))
    assert bad.returncode != 0 and "give a file name ending in .html, .svg or .png" in bad.stderr
    assert not (tmp_path / "run.pdf").exists()
    missing = alertd(*args, "--plot", str(tmp_path / "x.svg"), "--run", "exp9")
    assert missing.returncode != 0 and "--run 'exp9': no such run in the data (runs: exp1, exp2)" in missing.stderr
    alone = alertd(*args, "--run", "exp1")
    assert alone.returncode != 0 and "give --plot OUT too" in alone.stderr


def test_the_x_axis_is_the_step_by_default_and_time_on_request(tmp_path: Path) -> None:
    runs = logdir(tmp_path)
    args = ("dry-run", "--rules", str(tmp_path / "rules.yaml"), "--source", f"tensorboard:{runs}", "--run", "exp1")
    for x, want in ((None, "step"), ("time", "time"), ("step", "step")):
        out = tmp_path / f"{x}.svg"
        done = alertd(*args, "--plot", str(out), *(("--x", x) if x else ()))
        assert done.returncode == 0, done.stderr
        root = ET.fromstring(out.read_text())
        panels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
        assert [g.get("data-axis") for g in panels] == [want, want]
        captions = [t.text for g in panels for t in g.iter(f"{SVG}text") if t.get("class") == "tick axis"]
        assert captions == [want, want]
        ticks = [t.text or "" for t in panels[0].iter(f"{SVG}text") if t.get("class") == "tick"]
        assert ("50" in ticks) if want == "step" else any(t.startswith("+") for t in ticks)
    refused = alertd(*args[:-2], "--x", "time")
    assert refused.returncode == 1 and "--x is for --plot" in refused.stderr
