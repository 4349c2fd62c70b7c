"""A tiny plain-PyTorch DDP loop under torchrun (Gloo, CPU) with AlertdLoop, for test_exec_torchrun.py.

    torchrun --standalone --nproc_per_node=3 torchrun_child.py OUTDIR STEPS MODE
MODE `raise0`: rank 0 raises at step 5 while the others sleep outside any collective (so none of them fails on
its own with Gloo's "connection closed by peer" first: which rank failed first is then the test's to know);
`nan1`: rank 1's loss is NaN from step 8 on (each step then sleeps a little, so that alertd's stop arrives long
before STEPS)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from alertd.integrations.torchloop import AlertdLoop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import ddp_leave


def main(outdir: str, steps: int, mode: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with AlertdLoop(optimizer, output_dir=outdir, model=model, run="ddp") as run:
        for step in range(run.start_step, steps):
            if mode == "raise0" and step == 5:
                if rank == 0:
                    raise RuntimeError("rank 0 fails at step 5")
                time.sleep(20)  # out of any collective: torchrun ends them, no collateral "connection closed"
            loss = model(torch.randn(8, 4)).pow(2).mean()
            if mode == "nan1" and rank == 1 and step >= 8:
                loss = loss * float("nan")
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            optimizer.zero_grad()
            print(f"step={step} loss={float(loss.detach()):.4f}", flush=True)
            if run.boundary(step):
                print(f"rank {rank} stopped at step {step}", flush=True)
                break
            time.sleep(0.02 if step < 8 else 0.05)
    ddp_leave.leave(dist)  # every rank out of its last collective before any closes its connections


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
