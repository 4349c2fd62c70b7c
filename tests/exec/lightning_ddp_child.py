"""A tiny Lightning DDP run (CPU, 2 processes, Gloo) with AlertdCallback, for test_exec_lightning_ddp.py.

    python lightning_ddp_child.py OUTDIR
Lightning starts rank 1 itself (its subprocess launcher runs this script again). Rank 1's loss is NaN from step 8
on; every step takes 0.1 s at least, so that alertd's stop arrives long before `max_steps`. Each rank prints
`rank=R stopped at step N` (N: `trainer.global_step`) when `fit` is over."""

from __future__ import annotations

import sys
import time
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from alertd.integrations.lightning import AlertdCallback

PACE = 0.1
NAN_FROM = 8


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self._last = 0.0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss: torch.Tensor = self.layer(x).pow(2).mean()
        if self.global_rank == 1 and self.trainer.global_step >= NAN_FROM:
            loss = loss * float("nan")
        time.sleep(max(0.0, PACE - (time.monotonic() - self._last)))
        self._last = time.monotonic()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        # 100 batches a rank: max_steps, not the epoch's end, ends an undisturbed run
        return DataLoader(TensorDataset(torch.randn(1600, 8)), batch_size=8)


def main(outdir: str) -> None:
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    torch.manual_seed(0)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=60,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=outdir,
        callbacks=[AlertdCallback()],
    )
    trainer.fit(Tiny())
    print(f"rank={trainer.global_rank} stopped at step {trainer.global_step}", flush=True)
    # Lightning leaves the process group up after `fit`; left to the interpreter's exit, Gloo's threads may be
    # torn down while still joinable ("terminate called without an active exception", SIGABRT, now and then).
    # A training script shuts it down itself, as torch's own docs ask.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
