"""Fixtures of the textlog tests: real trainers' console output, captured once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alertd.model import Sample
from alertd.sources.config import TextLogConfig
from alertd.sources.textlog import TextLogSource

WRITERS = Path(__file__).resolve().parents[1] / "writers"


def run_writer(script: str, outdir: Path, *args: str) -> Path:
    """Run a real training script with stdout and stderr into one file (not a terminal); return the file."""
    outdir.mkdir(parents=True, exist_ok=True)
    log = outdir / "train.log"
    with open(log, "wb") as f:
        subprocess.run(
            [sys.executable, str(WRITERS / script), str(outdir), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=180,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"},
        )
    return log


@pytest.fixture(scope="session")
def hf_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real HF Trainer run (tiny GPT-2) whose loss turns NaN at step 12 of 20: its console output."""
    return run_writer("hf_trainer_run.py", tmp_path_factory.mktemp("hf"), "--steps", "20", "--nan-at", "12")


@pytest.fixture(scope="session")
def lightning_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Lightning run (TQDM bar, CSVLogger) whose train_loss turns NaN at step 12 of 20: its console output."""
    return run_writer("lightning_run.py", tmp_path_factory.mktemp("lightning"), "--steps", "20", "--nan-at", "12")


def source(path: str | Path, **kw: object) -> TextLogSource:
    """A textlog source named `log` on `path`."""
    return TextLogSource(TextLogConfig.model_validate({"type": "textlog", "name": "log", "path": str(path), **kw}))


def by_metric(samples: list[Sample], metric: str) -> list[tuple[int | None, float]]:
    """(step, value) of one metric's samples, in order."""
    return [(s.step, s.value) for s in samples if s.series.metric == metric]
