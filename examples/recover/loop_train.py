"""A plain PyTorch loop that alertd rolls back and goes on: `python loop_train.py OUTDIR [--nan-at 40]`.

A linear model, 60 updates of Adam at a constant LR 1e-3, and `AlertdLoop`, which records the loss and the
pre-clip gradient norm, saves `alertd-step=N.pt` every 10 updates (only finite weights; the latest kept), loads
the checkpoint a recovery plan names and skips its updates: the loop starts at `run.start_step`. Run it under
alertd:

    alertd exec --rules examples/recover/recover.yaml -- \
        python examples/recover/loop_train.py .state/recover --nan-at 40 --pace 0.05

`--nan-at N`: the loss of update N is NaN; `--nan-from N`: of every update from N on; `--pace S`: each step takes S
seconds at least. Each trained update prints `step=<u> loss=<x> lr=<lr>`.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch

from alertd.integrations.resume import resume_from
from alertd.integrations.torchloop import AlertdLoop

STEPS = 60


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--nan-from", type=int)
    parser.add_argument("--pace", type=float, default=0.0)
    a = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    data = torch.randn(STEPS, 16, 8, generator=torch.Generator().manual_seed(1))
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={resume_from()}", flush=True)
    update = 0
    with AlertdLoop(optimizer, scheduler, output_dir=a.out, model=model, save_every=10, keep=1) as run:
        for step in range(run.start_step, STEPS):  # 0, or the checkpoint's step after a recovery
            update, began = step + 1, time.monotonic()
            x = data[step]
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            if update == a.nan_at or (a.nan_from is not None and update >= a.nan_from):
                loss = loss * math.nan
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the norm before clipping
            if run.update(step, loss, norm):  # False: a planned (or commanded) skip: no update
                optimizer.step()
                print(f"step={update} loss={loss.item():.4f} lr={optimizer.param_groups[0]['lr']:g}", flush=True)
            scheduler.step()
            optimizer.zero_grad()
            time.sleep(max(0.0, a.pace - (time.monotonic() - began)))
            if run.boundary(step):  # alertd's commands; True: stop (saved if finite)
                break
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {update} finite={finite}", flush=True)


if __name__ == "__main__":
    main()
