"""`alertd dry-run --source mlflow:DIR` through a real subprocess, over a file store MLflow's client wrote."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from mlflow_kit import T0_MS


def alertd(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m alertd ARGS`."""
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120)


def source_name() -> str:
    """The `source` label a dry-run gives: the name of the rules file's mlflow source, else `mlflow`."""
    from alertd.config import load_config

    return next((s.name for s in load_config(["rules/default.yaml"], {}).sources if s.type == "mlflow"), "mlflow")


def test_dry_run_fires_loss_not_finite_at_the_nan_step(file_client: Any, mlruns: Path) -> None:
    from mlflow.entities import Metric

    exp = file_client.create_experiment("dry")
    run = file_client.create_run(exp, run_name="nan-run").info.run_id
    losses = [2.0, 1.8, 1.6, 1.5, 1.4, 1.3, 1.25, math.nan, 1.2]
    file_client.log_batch(run, metrics=[Metric("train/loss", v, T0_MS + 1000 * i, i) for i, v in enumerate(losses)])
    file_client.set_terminated(run, "FAILED", end_time=T0_MS + 9000)

    done = alertd("dry-run", "--rules", "rules/default.yaml", "--source", f"mlflow:{mlruns}", "--format", "json")
    assert done.returncode == 0, done.stderr
    firing = [x for x in map(json.loads, done.stdout.splitlines()) if x["state"] == "firing"]
    nan = next(x for x in firing if x["rule"] == "loss_not_finite")
    assert (nan["step"], nan["value"], nan["time"]) == (7, "NaN", "2026-05-28T20:26:47Z")
    assert nan["labels"] == {
        "metric": "train/loss",
        "source": source_name(),
        "run": run,
        "run_name": "nan-run",
        "experiment": "dry",
    }
    crashed = next(x for x in firing if x["rule"] == "run_crashed")
    assert crashed["labels"]["run"] == run and crashed["time"] == "2026-05-28T20:26:49Z"

    text = alertd("dry-run", "--rules", "rules/default.yaml", "--source", f"mlflow:{mlruns}")
    firing_line = next(line for line in text.stdout.splitlines() if "FIRING   loss_not_finite" in line)
    assert "train/loss=NaN step=7" in firing_line, text.stdout + text.stderr
