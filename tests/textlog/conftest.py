"""Fixtures of the textlog tests: real trainers' console output, captured once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
