"""A Lightning run that alertd rolls back and goes on: `python lightning_train.py OUTDIR [--nan-at 40]`.

A linear module, 60 updates of Adam at a constant LR 1e-3, a `ModelCheckpoint` every 10 updates (the latest kept),
`AlertdCallback()`, and the one line a script changes for `recover`: `trainer.fit(model, ckpt_path=resume_from())`.
Run it under alertd:

    alertd exec --rules examples/recover/recover.yaml -- \
        python examples/recover/lightning_train.py .state/recover --nan-at 40 --pace 0.05

`--nan-at N`: the loss of update N is NaN; `--nan-from N`: of every update from N on; `--pace S`: each step takes S
seconds at least. Each trained update prints `step=<u> loss=<x> lr=<lr>`.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from alertd.integrations.lightning import AlertdCallback
from alertd.integrations.resume import resume_from

STEPS = 60


class Linear(L.LightningModule):
    def __init__(self, at: int | None, since: int | None, pace: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.at, self.since, self.pace = at, since, pace

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        began = time.monotonic()
        (x,) = batch
        update = self.trainer.global_step + 1
        loss = (self.layer(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        if update == self.at or (self.since is not None and update >= self.since):
            loss = loss * math.nan
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        print(f"step={update} loss={loss.item():.4f} lr={lr:g}", flush=True)
        time.sleep(max(0.0, self.pace - (time.monotonic() - began)))
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--nan-from", type=int)
    parser.add_argument("--pace", type=float, default=0.0)
    a = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(STEPS * 16, 8, generator=torch.Generator().manual_seed(1)))
    model = Linear(a.nan_at, a.nan_from, a.pace)
    every_10 = ModelCheckpoint(dirpath=os.path.join(a.out, "ckpt"), every_n_train_steps=10, save_top_k=1)
    trainer = L.Trainer(
        default_root_dir=a.out,
        max_steps=STEPS,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[every_10, AlertdCallback()],
    )
    checkpoint = resume_from()  # None on a first start; the plan's checkpoint after a recovery
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={checkpoint}", flush=True)
    trainer.fit(model, DataLoader(data, batch_size=16), ckpt_path=checkpoint)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {trainer.global_step} finite={finite}", flush=True)


if __name__ == "__main__":
    main()
