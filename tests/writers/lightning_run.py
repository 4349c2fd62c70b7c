"""A tiny, real Lightning run whose console output and ``metrics.csv`` tests can read.

Usage::

    python lightning_run.py OUTDIR [--steps N] [--nan-at STEP] [--sleep SECONDS_PER_STEP]

It fits one linear layer to random data on the CPU with ``CSVLogger(OUTDIR)`` (the file is
``OUTDIR/lightning_logs/version_0/metrics.csv``) and the TQDM progress bar, whose postfix carries
``loss=..., v_num=0``. ``train_loss`` is logged every step (``log_every_n_steps=1``) and the CSV is flushed
every step, so the file grows while the run goes on. Validation runs halfway through and at the end and logs
``val_loss``: that key is new when it first appears, so Lightning rewrites ``metrics.csv`` with a wider header.

With ``--nan-at K`` the training loss is multiplied by NaN from step K on, where K counts finished optimizer
steps the way Lightning does (``self.global_step``, 0 for the first batch): it is the ``step`` column of the
``train_loss`` rows in ``metrics.csv``. ``--sleep`` waits that many seconds after every training step, so a test
can watch the CSV and the bar grow live.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 4
N_FEATURES = 8
VAL_BATCHES = 2


class TinyRegression(L.LightningModule):
    """One linear layer trained with MSE; it can turn its loss into NaN and slow itself down."""

    def __init__(self, nan_at: int | None = None, sleep: float = 0.0) -> None:
        super().__init__()
        self.layer = nn.Linear(N_FEATURES, 1)
        self.nan_at = nan_at
        self.sleep = sleep

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """Compute the loss, poison it from step ``nan_at`` on, and log it to the CSV and the progress bar."""
        loss = self._loss(batch)
        if self.nan_at is not None and self.global_step >= self.nan_at:
            loss = loss * math.nan
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        """Wait ``sleep`` seconds so that a watcher sees each step land."""
        if self.sleep > 0:
            time.sleep(self.sleep)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        """Log ``val_loss`` (a key the CSV has not seen before the first validation)."""
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD."""
        return torch.optim.SGD(self.parameters(), lr=0.1)


def random_loader(n_batches: int, seed: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    """``n_batches`` batches of random inputs whose targets are a fixed linear function plus noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n_batches * BATCH_SIZE, N_FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(len(x), 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, num_workers=0)


def _alertd(wanted: bool) -> list[L.Callback]:
    if not wanted:
        return []
    from alertd.integrations.lightning import AlertdCallback

    return [AlertdCallback()]


def main() -> None:
    """Parse the command line and run the training."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="CSVLogger save_dir")
    parser.add_argument("--steps", type=int, default=20, help="number of optimizer steps (max_steps, one epoch)")
    parser.add_argument("--nan-at", type=int, default=None, help="0-based global step from which the loss is NaN")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each training step")
    parser.add_argument("--alertd", action="store_true", help="add alertd's AlertdCallback (its defaults)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        logger=CSVLogger(args.outdir, flush_logs_every_n_steps=1),
        log_every_n_steps=1,
        # Lightning would pick RichProgressBar whenever `rich` is importable; the TQDM bar is the one wanted here.
        callbacks=[TQDMProgressBar(), *_alertd(args.alertd)],
        enable_checkpointing=False,
        val_check_interval=max(1, args.steps // 2),
        limit_val_batches=VAL_BATCHES,
        num_sanity_val_steps=0,
    )
    trainer.fit(
        TinyRegression(nan_at=args.nan_at, sleep=args.sleep),
        train_dataloaders=random_loader(args.steps, seed=1),
        val_dataloaders=random_loader(VAL_BATCHES, seed=2),
    )


if __name__ == "__main__":
    main()
