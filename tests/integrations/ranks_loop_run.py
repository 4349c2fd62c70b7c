"""A tiny plain-PyTorch DDP loop under torchrun (Gloo, CPU) recording with AlertdLoop; for test_ranks.py."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from alertd.integrations.torchloop import AlertdLoop


def main(outdir: str, steps: int) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with AlertdLoop(optimizer, output_dir=outdir, model=model, run="ddp", save_every=steps) as run:
        for step in range(run.start_step, steps):
            x = torch.randn(8, 4)
            loss = model(x).pow(2).mean()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            optimizer.zero_grad()
            if run.boundary(step):
                break
    dist.barrier()  # every rank done with its last collective before any closes its connections
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
