"""A plain PyTorch loop for `recover`: `python recover_torch_child.py OUTDIR MODE`.

A linear model, `STEPS` updates of Adam at a constant LR 1e-3 (a LambdaLR scheduler), `AlertdLoop` saving
`alertd-step=N.pt` every 10 updates (keeping one) and resuming where a plan or a restart says
(`range(run.start_step, STEPS)`). The loss of update `NAN_AT` is NaN (MODE `always`: of every update from it on).
Prints `attempt=<N> resume_from=<path or None>` first, `step=<u> loss=<x> lr=<lr>` for each update taken, and
`done at step <u> finite=<bool>` at the end. Each update takes `PACE` seconds at least, as a real one would.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch

from alertd.integrations.resume import resume_from
from alertd.integrations.torchloop import AlertdLoop

STEPS = 60
NAN_AT = 40
PACE = 0.05


def main(out: str, mode: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    data = torch.randn(STEPS, 16, 8, generator=torch.Generator().manual_seed(1))
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={resume_from()}", flush=True)
    update = 0
    with AlertdLoop(optimizer, scheduler, output_dir=out, model=model, save_every=10, keep=1) as run:
        for step in range(run.start_step, STEPS):
            update = step + 1
            started = time.monotonic()
            x = data[step]
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            if update == NAN_AT or (mode == "always" and update >= NAN_AT):
                loss = loss * math.nan
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
                print(f"step={update} loss={loss.item():.4f} lr={optimizer.param_groups[0]['lr']:g}", flush=True)
            scheduler.step()
            optimizer.zero_grad()
            time.sleep(max(0.0, PACE - (time.monotonic() - started)))
            if run.boundary(step):
                break
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {update} finite={finite}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "once")
