"""`expr` rules through the real `alertd` command: check, a dry-run over real TensorBoard event files, `alertd test`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from alertd.model import format_time
from alertd.testing.tbwriter import ScalarWriter

T0 = 1_760_000_000.0
RULES = """
rules:
  - name: overfitting
    condition: {expr: "`eval/loss` / `train/loss` > 1.5"}
    annotations:
      summary: "eval/train loss ratio {{ value }} at step {{ step }}"
"""


def alertd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def write_run(logdir: Path) -> dict[int, tuple[float, float]]:
    """A training run as TensorBoard's writer logs it: train loss every 50 steps, eval loss every 200, the
    eval loss pulling away from step 600 on. Returns (train, eval) at the steps that have both."""
    writer = ScalarWriter(logdir / "exp1")
    both = {}
    for step in range(0, 1001, 50):
        train = 2.0 * 0.997**step
        writer.add_scalar("train/loss", train, step, T0 + step)
        if step % 200 == 0:
            ev = train * (1.1 if step < 600 else 1.8)
            writer.add_scalar("eval/loss", ev, step, T0 + step + 5)
            both[step] = (train, ev)
    writer.close()
    return both


def test_a_dry_run_over_tensorboard_files_fires_at_the_step_the_data_says(tmp_path: Path) -> None:
    both = write_run(tmp_path / "logs")
    expected_step = min(step for step, (train, ev) in both.items() if ev / train > 1.5)
    assert expected_step == 600  # eval, logged every 200 steps, pulls away from step 600 on
    (tmp_path / "rules.yaml").write_text(RULES)
    out = alertd("dry-run", "--rules", "rules.yaml", "--source", "tensorboard:logs", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    got = lines[0]
    assert (got["rule"], got["state"], got["step"]) == ("overfitting", "firing", expected_step)
    assert got["time"] == format_time(T0 + expected_step + 5)  # the time of eval/loss's sample (the first name)
    assert abs(got["value"] - 1.8) < 1e-5  # the left side: eval/train (float32 in the event file)
    assert got["labels"]["metric"] == "eval/loss" and got["labels"]["run"] == "exp1"
    assert got["labels"]["source"] == "tensorboard"
    assert got["annotations"]["summary"].endswith(f"at step {expected_step}")


def test_check_names_the_place_of_a_bad_expression(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        "rules:\n  - name: overfitting\n    condition: {expr: 'eval/loss / train/loss > 1.5'}\n"
    )
    out = alertd("check", "rules.yaml", cwd=tmp_path)
    assert out.returncode != 0
    assert "rules.yaml:3: rules[0].condition.expr: column 1: write the metric name in backquotes (`eval/loss`)" in (
        out.stdout + out.stderr
    )


TEST_FILE = """
rule_files: [rules.yaml]
evaluation_interval: 5s
tests:
  - name: overfitting fires once eval/train passes 1.5
    interval: 10s
    input_series:
      - series: 'train/loss{run="exp1", source="tb"}'
        values: "2 2 2 2 2 2"
        steps: "0+100x5"
      - series: 'eval/loss{run="exp1", source="tb"}'
        values: "2.2 _ 2.4 _ 4 _"
        steps: "0+100x5"
    alert_rule_test:
      - eval_time: 35s
        alertname: overfitting
        exp_alerts: []
      - eval_time: 40s
        alertname: overfitting
        exp_alerts:
          - exp_labels: {metric: eval/loss, run: exp1, source: tb}
            exp_annotations: {summary: "eval/train loss ratio 2 at step 400"}
"""


def test_alertd_test_runs_an_expr_rule(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "t.yaml").write_text(TEST_FILE)
    ok = alertd("test", "t.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 passed, 0 failed" in ok.stdout
    (tmp_path / "bad.yaml").write_text(TEST_FILE.replace("eval_time: 35s", "eval_time: 25s").replace("40s", "30s"))
    bad = alertd("test", "bad.yaml", cwd=tmp_path)
    assert bad.returncode == 1
    assert "0 passed, 1 failed" in bad.stdout
    assert 'firing {metric="eval/loss", run="exp1", source="tb"}' in bad.stdout  # expected, not got at 30s
