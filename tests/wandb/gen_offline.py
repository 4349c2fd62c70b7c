"""Writes offline W&B runs with the real SDK (run as a child process: `python gen_offline.py DIR`).

Run `good` (display name `good-run`): 40 rows of `loss` (NaN at step 10, +Inf at 11), `train/acc`,
a nested `eval.f1`, a text value, and a 70 000-character text at step 20 (a record spanning several
chunks), system stats sampled every 0.2 s, then `finish()`. Run `bad`: 3 rows then `finish(exit_code=1)`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import wandb


def write_runs(root: Path) -> None:
    """Write the runs under `root` in a child process, offline, with nothing of this environment's W&B."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(root),
    }
    subprocess.run([sys.executable, __file__, str(root)], env=env, check=True, timeout=120)


def expected_loss(step: int) -> float:
    """The loss logged at `step`."""
    if step == 10:
        return float("nan")
    if step == 11:
        return float("inf")
    return 1.0 / (step + 1)


def main(root: str) -> None:
    settings = wandb.Settings(x_stats_sampling_interval=0.2, mode="offline")
    run = wandb.init(project="proj", dir=root, name="good-run", id="good", settings=settings)
    for step in range(40):
        row = {"loss": expected_loss(step), "train/acc": step / 100, "eval": {"f1": step / 50}, "tag": "x"}
        if step == 20:
            row["blob"] = "y" * 70_000
        run.log(row, step=step)
        if step % 10 == 0:
            time.sleep(0.25)
    run.finish()
    run = wandb.init(project="proj", dir=root, id="bad", settings=wandb.Settings(mode="offline", x_disable_stats=True))
    for _ in range(3):
        run.log({"loss": 1.0})
    run.finish(exit_code=1)


if __name__ == "__main__":
    main(sys.argv[1])
