"""A tiny plain-PyTorch DDP loop under torchrun (Gloo, CPU) recording with AlertdLoop; for test_ranks.py and
test_straggler.py.

`ranks_loop_run.py OUTDIR STEPS [SLOW_RANK]`: with SLOW_RANK, every rank works 15 ms a step before its backward
pass (a sleep standing for its data and forward pass) and rank SLOW_RANK 30 ms: a rank 2x slower. With
`$RANK1_COMMANDS`, rank 1 reads alertd's commands there (as a node with its own output directory would)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from alertd.integrations.torchloop import AlertdLoop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import ddp_leave


def main(outdir: str, steps: int, slow_rank: int | None) -> None:
    dist.init_process_group("gloo")
    work = 0.0 if slow_rank is None else 0.030 if dist.get_rank() == slow_rank else 0.015
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    commands = os.environ.get("RANK1_COMMANDS") if dist.get_rank() == 1 else None
    with AlertdLoop(
        optimizer, output_dir=outdir, model=model, run="ddp", save_every=steps, commands_dir=commands
    ) as run:
        for step in range(run.start_step, steps):
            x = torch.randn(8, 4)
            loss = model(x).pow(2).mean()
            if work:
                time.sleep(work)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            optimizer.zero_grad()
            if run.boundary(step):
                break
    ddp_leave.leave(dist)  # every rank out of its last collective before any closes its connections


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
