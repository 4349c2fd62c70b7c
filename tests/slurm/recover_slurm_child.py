"""The plain PyTorch loop of `examples/recover/loop_train.py`, as a Slurm job: `python recover_slurm_child.py
OUTDIR TBDIR`.

The same linear model, Adam at a constant LR 1e-3, `AlertdLoop` saving `alertd-step=N.pt` in OUTDIR every 10 updates
(keeping one), a NaN loss at update `NAN_AT`. Differences: there is no alertd exec, so no alertd environment: a
requeued job finds alertd's plan in OUTDIR (`resume_from(OUTDIR)`, `AlertdLoop(output_dir=OUTDIR)`); the loss also
goes to a TensorBoard event file in TBDIR held open (alertd verifies its writer, whose `SLURM_JOB_ID` names the
job); once the loss was NaN (the weights are then NaN too) each update takes `PACE_AFTER_NAN`, so the run is still
there when alertd requeues it. Prints `attempt=<SLURM_RESTART_COUNT> resume_from=<path or None>` first,
`step=<u> loss=<x> lr=<lr>` for each update taken, and `done at step <u> finite=<bool>` at the end.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch

from alertd.integrations.resume import resume_from
from alertd.integrations.torchloop import AlertdLoop
from alertd.runs.writers import hold
from alertd.testing.tbwriter import ScalarWriter

STEPS = 60
NAN_AT = 40
PACE = 0.05
PACE_AFTER_NAN = 0.5


def main(out: str, tb: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    data = torch.randn(STEPS, 16, 8, generator=torch.Generator().manual_seed(1))
    print(f"attempt={os.environ.get('SLURM_RESTART_COUNT', '0')} resume_from={resume_from(out)}", flush=True)
    writer = ScalarWriter(tb)
    writer.flush()
    hold(writer.path)
    update, nan = 0, False
    with AlertdLoop(optimizer, scheduler, output_dir=out, model=model, save_every=10, keep=1) as run:
        for step in range(run.start_step, STEPS):
            update = step + 1
            started = time.monotonic()
            x = data[step]
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            if update == NAN_AT:
                loss = loss * math.nan
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
                writer.add_scalar("train/loss", loss.item(), step)
                writer.flush()
                nan = nan or not math.isfinite(loss.item())
                print(f"step={update} loss={loss.item():.4f} lr={optimizer.param_groups[0]['lr']:g}", flush=True)
            scheduler.step()
            optimizer.zero_grad()
            time.sleep(max(0.0, (PACE_AFTER_NAN if nan else PACE) - (time.monotonic() - started)))
            if run.boundary(step):
                break
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {update} finite={finite}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
