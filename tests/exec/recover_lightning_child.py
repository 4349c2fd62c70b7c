"""A tiny Lightning run for `recover`: `python recover_lightning_child.py OUTDIR MODE`.

A linear LightningModule, `STEPS` updates of Adam at a constant LR 1e-3 (a LambdaLR scheduler stepped each
update), a `ModelCheckpoint` saving every 10 updates (`save_top_k=1`: only the latest kept), `AlertdCallback()`,
and `trainer.fit(model, ckpt_path=resume_from())`: the one line a script changes. The loss of update `NAN_AT` is
NaN (MODE `always`: of every update from it on). Prints `attempt=<N> resume_from=<path or None>` first, `step=<u>
loss=<x> lr=<lr>` from `training_step` for each update trained, and `done at step <N> finite=<bool>` at the end.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from alertd.integrations.lightning import AlertdCallback
from alertd.integrations.resume import resume_from

STEPS = 60
NAN_AT = 40
PACE = 0.05


class Linear(L.LightningModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.mode = mode

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        started = time.monotonic()
        (x,) = batch
        update = self.trainer.global_step + 1
        loss = (self.layer(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        if update == NAN_AT or (self.mode == "always" and update >= NAN_AT):
            loss = loss * math.nan
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        print(f"step={update} loss={loss.item():.4f} lr={lr:g}", flush=True)
        time.sleep(max(0.0, PACE - (time.monotonic() - started)))
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(out: str, mode: str) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(STEPS * 16, 8, generator=torch.Generator().manual_seed(1)))
    model = Linear(mode)
    trainer = L.Trainer(
        default_root_dir=out,
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=10, save_top_k=1),
            AlertdCallback(),
        ],
    )
    checkpoint = resume_from()
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={checkpoint}", flush=True)
    trainer.fit(model, DataLoader(data, batch_size=16), ckpt_path=checkpoint)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {trainer.global_step} finite={finite}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "once")
