"""A data-parallel PyTorch job that alertd watches rank by rank: `torchrun --nproc_per_node=3 ddp_train.py OUTDIR`.

Each rank runs `AlertdLoop`, which writes its loss, gradient norm and `train/step_time` (the rank's heartbeat)
to OUTDIR/alertd-samples.jsonl with labels `rank`, `local_rank`, `node`, `world_size`, and registers the hook
alertd's `stacks` action dumps its Python stacks through. Under alertd:

    alertd exec --rules examples/distributed/distributed.yaml -- \\
        torchrun --standalone --nproc_per_node=3 --tee 3 examples/distributed/ddp_train.py .state/ddp --hang-at 20

`--hang-at N`: at step N rank `--hang-rank` (2) sleeps `--hang` seconds (30) before the all_reduce the others
wait in, a collective that hangs; `--slow-rank R`: rank R takes twice as long a step; `--steps` (60), `--pace`
(0.1 s a step at least).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

from alertd.integrations.torchloop import AlertdLoop


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--pace", type=float, default=0.1)
    parser.add_argument("--hang-at", type=int)
    parser.add_argument("--hang-rank", type=int, default=2)
    parser.add_argument("--hang", type=float, default=30.0)
    parser.add_argument("--slow-rank", type=int)
    a = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with AlertdLoop(optimizer, output_dir=a.out, model=model, run="ddp", save_every=20) as run:
        for step in range(run.start_step, a.steps):
            began = time.monotonic()
            x = torch.randn(16, 8)
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            loss.backward()
            if step == a.hang_at and rank == a.hang_rank:
                time.sleep(a.hang)  # the others wait in the all_reduce below
            for p in model.parameters():  # DDP's gradient all-reduce, by hand
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            optimizer.zero_grad()
            pace = a.pace * (2 if rank == a.slow_rank else 1)
            time.sleep(max(0.0, pace - (time.monotonic() - began)))
            if run.boundary(step):
                break
    dist.barrier()  # every rank done with its last collective before any closes its connections
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
