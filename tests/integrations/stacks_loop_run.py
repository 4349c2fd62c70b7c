"""A tiny DDP loop under torchrun (Gloo, CPU) with AlertdLoop where rank 2 straggles before an all_reduce; for
test_stacks.py. argv: outdir, steps, the step rank 2 straggles at, how long it sleeps."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from alertd.integrations.torchloop import AlertdLoop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import ddp_leave


def straggler_sleep(seconds: float) -> None:
    time.sleep(seconds)


def main(outdir: str, steps: int, at: int, seconds: float) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    out = Path(outdir)
    with AlertdLoop(optimizer, output_dir=outdir, model=model, run="hang", save_every=10_000) as run:
        for step in range(run.start_step, steps):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            if step == at:
                (out / f"AT.rank{rank}").write_text(str(time.time()))
                if rank == 2:
                    straggler_sleep(seconds)
            dist.all_reduce(grad)
            if run.update(step, loss, grad.norm()):
                optimizer.step()
            optimizer.zero_grad()
            if run.boundary(step):
                break
    (out / f"DONE.rank{rank}").write_text(str(time.time()))
    ddp_leave.leave(dist)  # every rank out of its last collective before any closes its connections


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
