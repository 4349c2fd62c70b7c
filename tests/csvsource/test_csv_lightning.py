"""CsvSource over files written by Lightning's own CSVLogger, polled while it appends and rewrites them."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

Rows = list[tuple[int, dict[str, float]]]


def logger_at(save_dir: Path, version: int | None = None) -> CSVLogger:
    """A CSVLogger that writes only when the test calls `save()`."""
    return CSVLogger(save_dir=save_dir, version=version, flush_logs_every_n_steps=1_000_000)


def log(logger: CSVLogger, rows: Rows, step: int, metrics: dict[str, float]) -> None:
    """`log_metrics` and remember what was logged."""
    logger.log_metrics(metrics, step=step)
    rows.append((step, metrics))


def test_rewrites_with_new_keys_are_read_exactly_once(tmp_path: Path, kit: SimpleNamespace) -> None:
    logger = logger_at(tmp_path)
    src = kit.make_source(tmp_path / "lightning_logs" / "*" / "metrics.csv")
    rows: Rows = []
    seen = list(src.read_new(kit.NOW))
    for step in range(40):
        metrics = {"train_loss": 1.0 / (step + 1)}
        if step == 13:
            metrics["train_loss"] = math.nan
        if step % 10 == 9:
            metrics["val_loss"] = 2.0 - step / 100  # first at step 9: a new key, so a rewrite
        if step == 25:
            metrics["lr-SGD"] = 0.01  # another new key, sorted in the middle of the header
        if step == 31:
            metrics["grad_norm"] = math.inf
        log(logger, rows, step, metrics)
        if step % 3 == 1:
            seen += src.read_new(kit.NOW)  # logged but not saved yet: nothing new in the file
        if step % 4 == 0 or step in (9, 25, 31):
            logger.save()
        if step % 5 == 0:
            seen += src.read_new(kit.NOW)
    logger.save()
    seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(rows)
    assert {s.series.labels for s in seen} == {(("run", "version_0"), ("source", "pl"))}
    assert {s.time for s in seen} == {kit.NOW}
    nan = [s for s in seen if s.series.metric == "train_loss" and math.isnan(s.value)]
    assert [s.step for s in nan] == [13]
    assert src.read_new(kit.NOW) == []
    header = Path(logger.experiment.metrics_file_path).read_bytes().split(b"\r\n")[0]
    assert header == b"grad_norm,lr-SGD,step,train_loss,val_loss"


def test_rewrite_seen_half_written_across_polls(tmp_path: Path, kit: SimpleNamespace) -> None:
    """Lightning's open("w") truncates, then writes the wider file in pieces: every state is polled."""
    logger = logger_at(tmp_path)
    path = Path(logger.experiment.metrics_file_path)
    before: Rows = []
    for step in range(6):
        log(logger, before, step, {"train_loss": 0.5 + step / 7, "epoch": 0.0})
    logger.save()
    old = path.read_bytes()
    after: Rows = []
    log(logger, after, 6, {"train_loss": 0.25, "val_loss": 0.75, "epoch": 0.0})
    log(logger, after, 7, {"train_loss": math.nan, "epoch": 1.0})
    logger.save()
    full = path.read_bytes()
    assert full.startswith(b"epoch,step,train_loss,val_loss\r\n") and len(full) > len(old)
    for k in range(0, len(full) + 1, 3):
        j = (k * 7) % (len(old) + 1)  # the old file was itself seen cut at byte j
        kit.overwrite(path, old[:j])
        src = kit.make_source(path)
        seen = list(src.read_new(kit.NOW))
        kit.overwrite(path, old)
        seen += src.read_new(kit.NOW)
        kit.overwrite(path, b"")  # truncated by open("w")
        seen += src.read_new(kit.NOW)
        kit.overwrite(path, full[:k])  # partly written
        seen += src.read_new(kit.NOW)
        kit.overwrite(path, full[: (k + len(full)) // 2])
        seen += src.read_new(kit.NOW)
        kit.overwrite(path, full)
        seen += src.read_new(kit.NOW)
        assert kit.triples(seen) == kit.expected(before + after), f"cut at {k} (old cut at {j})"


def test_rewrite_of_a_long_header_that_keeps_its_first_256_bytes(tmp_path: Path, kit: SimpleNamespace) -> None:
    """A header longer than LineTail's head, widened at its end, polled only after the rewrite."""
    logger = logger_at(tmp_path)
    src = kit.make_source(tmp_path / "lightning_logs" / "*" / "metrics.csv")
    names = [f"train/metric_{i:02d}_with_a_long_name" for i in range(12)]
    rows: Rows = []
    for step in range(5):
        log(logger, rows, step, {name: step + i / 10 for i, name in enumerate(names)})
    logger.save()
    seen = list(src.read_new(kit.NOW))
    for step in range(5, 9):
        log(logger, rows, step, {names[0]: float(step), "zz_val_loss": step / 2})
    logger.save()
    seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(rows)
    assert len(Path(logger.experiment.metrics_file_path).read_bytes().split(b"\r\n")[0]) > 256


def test_a_new_run_in_the_same_version_dir_is_read_as_new(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    """CSVLogger(version=0) again deletes metrics.csv and writes fewer rows than were read."""
    src = kit.make_source(tmp_path / "lightning_logs" / "*" / "metrics.csv")
    first = logger_at(tmp_path, version=0)
    rows_a: Rows = []
    for step in range(10):
        log(first, rows_a, step, {"train_loss": 1.0 + step})
    first.save()
    seen_a = src.read_new(kit.NOW)
    assert kit.triples(seen_a) == kit.expected(rows_a)
    second = logger_at(tmp_path, version=0)
    rows_b: Rows = []
    log(second, rows_b, 0, {"train_loss": 9.0})  # the file is deleted here
    assert src.read_new(kit.NOW) == []
    assert src.read_new(kit.NOW) == []
    log(second, rows_b, 1, {"train_loss": 8.0})
    log(second, rows_b, 2, {"train_loss": 7.0})
    second.save()
    with caplog.at_level(logging.INFO, logger="alertd.sources"):
        with_b = src.read_new(kit.NOW)
    assert kit.triples(with_b) == kit.expected(rows_b)
    assert any("holds another file" in r.getMessage() for r in caplog.records)


def test_a_new_run_rewriting_the_file_in_place_is_read_as_new(tmp_path: Path, kit: SimpleNamespace) -> None:
    """Same inode, fewer rows, another first row: a new file, not a rewrite in progress."""
    first = logger_at(tmp_path, version=0)
    path = Path(first.experiment.metrics_file_path)
    rows_a: Rows = []
    for step in range(10):
        log(first, rows_a, step, {"train_loss": 1.0 + step})
    first.save()
    src = kit.make_source(path)
    assert kit.triples(src.read_new(kit.NOW)) == kit.expected(rows_a)
    other = tmp_path / "other"
    second = logger_at(other, version=0)
    rows_b: Rows = [(0, {"train_loss": 5.0}), (1, {"train_loss": 4.0})]
    for step, metrics in rows_b:
        second.log_metrics(metrics, step=step)
    second.save()
    kit.overwrite(path, Path(second.experiment.metrics_file_path).read_bytes())
    assert kit.triples(src.read_new(kit.NOW)) == kit.expected(rows_b)


def test_cursor_restore_across_a_rewrite_while_down(tmp_path: Path, kit: SimpleNamespace) -> None:
    logger = logger_at(tmp_path)
    pattern = tmp_path / "lightning_logs" / "*" / "metrics.csv"
    path = Path(logger.experiment.metrics_file_path)
    rows: Rows = []
    for step in range(8):
        log(logger, rows, step, {"train_loss": 3.0 - step / 10})
    logger.save()
    src = kit.make_source(pattern)
    seen = list(src.read_new(kit.NOW))
    cursor = json.loads(json.dumps(src.cursor()))
    log(logger, rows, 8, {"train_loss": 2.0, "val_loss": 1.5})  # new key: the rewrite happens while down
    logger.save()
    log(logger, rows, 9, {"train_loss": 1.9})
    logger.save()
    restarted = kit.make_source(pattern)
    restarted.restore(cursor)
    seen += restarted.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(rows)

    # a cursor taken half-way through a rewrite (rows still being skipped) resumes the skipping
    full_before = path.read_bytes()
    log(logger, rows, 10, {"train_loss": 1.8, "grad_norm": 0.5})
    logger.save()
    full = path.read_bytes()
    assert len(full) > len(full_before)
    half = full.index(b"\r\n", len(full) // 3) + 2
    kit.overwrite(path, full[:half])
    seen += restarted.read_new(kit.NOW)
    third = kit.make_source(pattern)
    third.restore(json.loads(json.dumps(restarted.cursor())))
    kit.overwrite(path, full)
    seen += third.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(rows)
    assert third.read_new(kit.NOW) == []


class TinyModel(L.LightningModule):
    """One linear layer fitted with MSE; logs `train_loss` every step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """The loss of one batch, logged."""
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD."""
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_a_real_trainer_run(tmp_path: Path, kit: SimpleNamespace) -> None:
    torch.manual_seed(0)
    x = torch.randn(20, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=5,
        logger=CSVLogger(save_dir=tmp_path),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyModel(), train_dataloaders=loader)
    samples = kit.make_source(tmp_path / "lightning_logs" / "*" / "metrics.csv").read_new(kit.NOW)
    losses = [s for s in samples if s.series.metric == "train_loss"]
    assert [s.step for s in losses] == [0, 1, 2, 3, 4]
    assert all(math.isfinite(s.value) and s.value > 0 for s in losses)
    assert {s.series.metric for s in samples} <= {"train_loss", "epoch"}
    assert {s.series.label("run") for s in samples} == {"version_0"}


def test_dry_run_fires_loss_not_finite_at_the_nan_step(tmp_path: Path) -> None:
    logger = logger_at(tmp_path)
    for step in range(12):
        metrics = {"train_loss": math.nan if step == 7 else 2.0 / (step + 1)}
        if step in (4, 9):
            metrics["val_loss"] = 1.0  # a rewrite on the way
        logger.log_metrics(metrics, step=step)
        if step % 3 == 2:
            logger.save()
    logger.save()
    path = logger.experiment.metrics_file_path
    args = ["dry-run", "--rules", "rules/default.yaml", "--source", f"csv:{path}", "--format", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "alertd", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    transitions = [json.loads(line) for line in done.stdout.splitlines()]
    firing = [t for t in transitions if t["rule"] == "loss_not_finite" and t["state"] == "firing"]
    assert len(firing) == 1
    assert firing[0]["step"] == 7
    assert firing[0]["value"] == "NaN"
    assert firing[0]["labels"]["run"] == "metrics"


def test_a_rewrite_is_routine_no_warning(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logger_at(tmp_path)
    src = kit.make_source(tmp_path / "lightning_logs" / "*" / "metrics.csv")
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    src.read_new(kit.NOW)
    logger.log_metrics({"b": 1.0}, step=1)
    logger.save()
    with caplog.at_level(logging.DEBUG, logger="alertd.sources"):
        assert kit.triples(src.read_new(kit.NOW)) == kit.expected([(1, {"b": 1.0})])
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
