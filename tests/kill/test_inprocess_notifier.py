"""The in-process actions' notifier (lr_scale, skip_step, save): one command per firing in the run's commands
directory, never outside its place, at most `at_most` per run, and the trainer's acknowledgement reported. The
trainer here is the real one of `alertd.integrations.steering` (a torch optimizer and scheduler), polled in a
thread as a training loop polls at its step boundaries."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pydantic
import pytest
import torch
from kill_helpers import firing, notification

from alertd.actions.config import LrScaleConfig, SaveConfig, SkipStepConfig
from alertd.actions.inprocess import InProcessNotifier
from alertd.integrations.recorder import RunRecorder
from alertd.integrations.steering import Steering

pytestmark = pytest.mark.anyio


def lr_scale(path: str, **keys: Any) -> LrScaleConfig:
    """A lr_scale config."""
    return LrScaleConfig.model_validate({"type": "lr_scale", "path": path, **keys})


class Trainer:
    """A trainer's side of a commands directory: a real optimizer and scheduler, and the Steering the callbacks use,
    taking the commands at a step boundary every 20 ms in a thread."""

    def __init__(self, out: Path) -> None:
        self.optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0)
        self.steering = Steering(None, None)
        self.recorder = RunRecorder(out / "samples.jsonl", None, "r", ())
        self.steering.start(out, self.recorder)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.step = 0

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self.step += 1
            orders = self.steering.boundary(self.step, [self.optimizer], [self.scheduler])
            for command in orders.save:
                self.steering.refuse(command, self.step, "no model to save here")

    def __enter__(self) -> Trainer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


async def test_lr_scale_is_acknowledged_and_reported(tmp_path: Path) -> None:
    """The command lands in the run's directory; the trainer halves its LR; the report says the step, old and new
    LR; the command is done, and a repeat of the same firing writes nothing."""
    run = tmp_path / "exp1"
    with Trainer(run) as trainer:
        notifier = InProcessNotifier("cut", lr_scale("{run}/alertd-commands", base_dir=str(tmp_path), factor=0.5))
        alert = firing({"run": "exp1", "metric": "train/grad_norm"}, rule="grad_spike", value=1e4)
        await notifier.send(notification(alert))
        await notifier.send(notification(alert))
        await notifier.wait_idle()
    (report,) = notifier.history
    assert report.acked and report.refused is None
    assert (report.old_lr, report.new_lr) == (0.1, 0.05) and trainer.optimizer.param_groups[0]["lr"] == 0.05
    assert trainer.scheduler.base_lrs == [0.05]
    assert (
        report.summary() == f"lr_scale cut for grad_spike: the trainer scaled its LR 0.1 -> 0.05 at step {report.step}"
    )
    (done,) = (run / "alertd-commands").glob("*.cmd.done")
    body = json.loads(done.read_text())
    assert body["action"] == "lr_scale" and body["factor"] == 0.5 and body["rule"] == "grad_spike"
    assert body["labels"]["run"] == "exp1" and body["notifier"] == "cut"


async def test_at_most_counts_per_run(tmp_path: Path) -> None:
    """at_most: 2: the third firing on a run is refused (counted from the run's directory, so a restarted alertd
    counts the same); another run has its own count."""
    for run in ("a", "b"):
        (tmp_path / run / "alertd-commands").mkdir(parents=True)
    notifier = InProcessNotifier("cut", lr_scale("{run}/alertd-commands", base_dir=str(tmp_path), at_most=2, wait=0))
    for run in ("a", "a", "a", "b"):
        await notifier.send(notification(firing({"run": run}, active_at=time.time())))
        await asyncio.sleep(0.002)
    await notifier.wait_idle()
    refused = [r.refused for r in notifier.history]
    assert sum(r is None for r in refused) == 3
    (why,) = [r for r in refused if r is not None]
    assert why.startswith("at_most 2 reached for this run (2 commands in ")
    again = InProcessNotifier("cut", lr_scale("{run}/alertd-commands", base_dir=str(tmp_path), at_most=2, wait=0))
    await again.send(notification(firing({"run": "a"})))
    assert "at_most 2 reached" in str(again.history[0].refused)


@pytest.mark.parametrize("run", ["..", "../outside", "/abs", "link"])
async def test_a_commands_directory_outside_base_dir_is_refused(tmp_path: Path, run: str) -> None:
    """A `..` part, an absolute label value and a symbolic link out of base_dir are refused; nothing is written."""
    base, outside = tmp_path / "runs", tmp_path / "outside"
    (outside / "alertd-commands").mkdir(parents=True)
    base.mkdir()
    (base / "link").symlink_to(outside)
    raw = {"path": "{run}/alertd-commands", "base_dir": str(base), "wait": 0}
    for cfg in (
        SkipStepConfig.model_validate({**raw, "type": "skip_step"}),
        SaveConfig.model_validate({**raw, "type": "save"}),
    ):
        notifier = InProcessNotifier("n", cfg)
        await notifier.send(notification(firing({"run": run if run != "/abs" else str(outside)})))
        (report,) = notifier.history
        assert report.refused is not None and ("'..' part" in report.refused or "leaves base_dir" in report.refused)
    assert list((outside / "alertd-commands").iterdir()) == []


async def test_missing_directory_and_label_are_refused_and_no_ack_is_reported(tmp_path: Path) -> None:
    """No directory: refused (never created); no `run` label: refused; a trainer that never answers: reported as
    asked, without an acknowledgement, after `wait`."""
    notifier = InProcessNotifier("n", lr_scale(str(tmp_path) + "/{run}/alertd-commands", wait=0.3))
    await notifier.send(notification(firing({"run": "gone"})))
    await notifier.send(notification(firing({"metric": "loss"})))
    (tmp_path / "quiet" / "alertd-commands").mkdir(parents=True)
    await notifier.send(notification(firing({"run": "quiet"})))
    await notifier.wait_idle()
    gone, unlabelled, quiet = notifier.history
    assert "does not exist (not created)" in str(gone.refused) and not (tmp_path / "gone").exists()
    assert "no label 'run'" in str(unlabelled.refused)
    assert quiet.refused is None and not quiet.acked
    assert quiet.summary().endswith("; no acknowledgement within 0.3s")


async def test_a_refusal_by_the_trainer_is_reported(tmp_path: Path) -> None:
    """The trainer refuses a save it can't make: the report says so, with the trainer's reason."""
    run = tmp_path / "r"
    with Trainer(run):
        cfg = SaveConfig.model_validate({"type": "save", "path": str(run / "alertd-commands")})
        notifier = InProcessNotifier("keep", cfg)
        await notifier.send(notification(firing({"run": "r"})))
        await notifier.wait_idle()
    (report,) = notifier.history
    assert report.acked and report.refused == "the trainer refused: no model to save here"
    assert report.summary().startswith("save keep for loss_not_finite: REFUSED (step ")


def test_config_errors() -> None:
    """Relative paths without base_dir, stray braces, a factor of 0 and a negative at_most are config errors."""
    with pytest.raises(pydantic.ValidationError, match="must be absolute unless base_dir"):
        lr_scale("{run}/alertd-commands")
    with pytest.raises(pydantic.ValidationError, match="stray '\\{'"):
        lr_scale("/runs/{run/alertd-commands")
    with pytest.raises(pydantic.ValidationError, match="greater than 0"):
        lr_scale("/runs/{run}", factor=0)
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 1"):
        lr_scale("/runs/{run}", at_most=0)
