"""Write examples/default_run.jsonl: one recorded training run on which every default rule fires once.

    python examples/make_default_run.py
    alertd dry-run --rules rules/default.yaml --source samples:examples/default_run.jsonl

The story (one training step every 10 s, GPU readings every 10 s, t = seconds after 2026-05-29T00:00Z):
- train/grad_norm jumps to 150 at step 200 (grad_norm_exploding), and is NaN at step 420 (grad_norm_not_finite);
- train/loss jumps to 2.5x its median at step 300 (loss_spike) and is NaN at step 450 (loss_not_finite);
- train/tokens_per_second halves from step 350 (throughput_drop);
- eval/perplexity, every 50 steps, rises at steps 400, 450 and 500 (val_metric_rising at step 500);
- eval/loss, every 50 steps, makes its best at step 200 and none after (val_loss_plateau, patience 5, at step 450);
- the run logs step 520 and goes quiet for 15 minutes (run_stalled 10 minutes later, t = 5800), then logs
  steps 521 to 530 from t = 6100 and ends with HF Trainer's summary (`train_runtime`: run_finished at t = 6190);
- GPU 1 runs above 83 °C from t = 1000 to 1600 (gpu_hot at 1300) and throttles thermally (at 1300);
- GPU 0 idles below 40 % from t = 3000 (gpu_underutilized at 4800), GPU 3 power-brakes from t = 2000 (1m: 2060);
- GPU 2 counts 2 new uncorrected ECC errors at t = 2500 and falls off the bus at t = 6500;
- a W&B run crashes at t = 4000 (run_crashed); the `wb` source reports failing from t = 5010 (source_failing at 5130);
- the `logs` source passes its series limit at t = 5500 (series_limit_reached: 120 samples of new series dropped);
- alertd's state directory can't be written from t = 5600 to 5700, a full disk (state_not_saved at 5610);
- a second run, an HF Trainer's printed log, logs its loss as 0 from step 55, t = 3550 (loss_zeroed: its NaN,
  hidden by the Trainer's NaN filter), and prints `NaN detected` at step 150, t = 4500 (nan_in_log);
- a third, W&B run starts at t = 6000 and logs steps 0 to 50; its file ends with no exit record
  (run_lost at the end of the data, t = 6500);
- a fourth run, `gpt-diverge`, logs train/loss at 2.0 for 220 steps, then climbing 0.05 a step, too slowly for
  loss_spike: the last 20 samples average 1.5x the 200 before at step 249, t = 2490 (loss_diverging);
- a fifth run, `ddp-4`, four ranks on two nodes writing train/step_time and train/step_busy every 10 s: rank 3
  works 1 s a step instead of 0.5 s from t = 1000 to 2000, so every rank's step takes 2 s instead of 1 s
  (rank_straggler names rank 3 by its busy time), rank 2 ends no step from t = 3000 to 3300 while the
  others go on (rank_stalled), and no rank ends a step from t = 2200 to 2900 (job_hung, and run_stalled with it,
  at 2190 + 10 minutes);
- Slurm (a `slurm` source): job 12345, submitted an hour before the data starts, waits in the queue (its
  pending time passes 2 hours at t = 3900: slurm_job_pending); job 12346 starts at t = 3000 and ends
  OUT_OF_MEMORY at t = 5200 (slurm_job_failed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

T0 = 1780012800.0  # 2026-05-29T00:00:00Z
OUT = Path(__file__).with_name("default_run.jsonl")


def line(metric: str, labels: dict[str, str], t: float, step: int | None, value: float) -> str:
    v: float | str = value if math.isfinite(value) else ("NaN" if math.isnan(value) else "+Inf")
    return json.dumps({"metric": metric, "labels": labels, "time": T0 + t, "step": step, "value": v})


def training() -> list[tuple[float, str]]:
    run = {"source": "tb", "run": "gpt-small", "host": "node1", "pid": "4242"}
    out = []
    for step in range(531):
        t = step * 10.0 if step <= 520 else 6100.0 + (step - 521) * 10.0
        loss = 3.0 * math.exp(-step / 300) + 0.5
        if step == 300:
            loss *= 2.5
        if step == 450:
            loss = math.nan
        grad = 150.0 if step == 200 else (math.nan if step == 420 else 1.0 + (step % 5) * 0.1)
        tps = 50_000.0 if step < 350 else 20_000.0
        out += [(t, line("train/loss", run, t, step, loss)), (t, line("train/grad_norm", run, t, step, grad))]
        out.append((t, line("train/tokens_per_second", run, t, step, tps)))
        if step % 50 == 0:
            ppl = [40, 30, 25, 22, 20, 19, 18, 17, 18.5, 19, 19.5][step // 50]
            out.append((t, line("eval/perplexity", run, t, step, ppl)))
            val = [3.0, 2.5, 2.2, 2.0, 1.9, 1.9, 1.91, 1.9, 1.92, 1.91, 1.9][step // 50]
            out.append((t, line("eval/loss", run, t, step, val)))
    out.append((6190.0, line("train_runtime", run, 6190.0, 530, 6190.0)))
    return out


def gpus() -> list[tuple[float, str]]:
    out = []
    for i in range(0, 7000, 10):
        t = float(i)
        for gpu in range(4):
            labels = {"source": "gpu", "gpu": str(gpu), "host": "node1"}
            util = 20.0 if gpu == 0 and t >= 3000 else 95.0
            hot = gpu == 1 and 1000 <= t < 1600
            out.append((t, line("gpu.utilization", labels, t, None, util)))
            out.append((t, line("gpu.temperature", labels, t, None, 86.0 if hot else 70.0)))
            out.append((t, line("gpu.throttle.thermal", labels, t, None, 1.0 if hot else 0.0)))
            out.append((t, line("gpu.throttle.hw_power_brake", labels, t, None, float(gpu == 3 and t >= 2000))))
            out.append((t, line("gpu.ecc.uncorrected", labels, t, None, 2.0 if gpu == 2 and t >= 2500 else 0.0)))
            out.append((t, line("gpu.lost", labels, t, None, float(gpu == 2 and t >= 6500))))
        if i % 30 == 0:
            out.append((t, line("alertd.source.up", {"source": "wb"}, t, None, 0.0 if t >= 5000 else 1.0)))
    out.append((5500.0, line("alertd.series.dropped", {"source": "logs"}, 5500.0, None, 120.0)))
    out.append((5600.0, line("alertd.state.saved", {}, 5600.0, None, 0.0)))  # appended at each change
    out.append((5700.0, line("alertd.state.saved", {}, 5700.0, None, 1.0)))
    wb = {"source": "wb", "run": "team/lab/abc123", "run_name": "gpt-wb"}
    out.append((4000.0, line("run.crashed", wb, 4000.0, None, 1.0)))
    hf = {"source": "logs", "run": "bert/train.log"}
    for step in range(151):
        t = 3000.0 + step * 10.0
        out.append((t, line("loss", hf, t, step, 0.0 if step >= 55 else 2.5 - step / 100)))
    out.append((4500.0, line("log.event", {**hf, "event": "nan_detected"}, 4500.0, 150, 1.0)))
    wb2 = {"source": "wbo", "run": "def456"}
    out.append((6000.0, line("run.started", wb2, 6000.0, None, 1.0)))
    for step in range(51):
        t = 6000.0 + step * 10.0
        out.append((t, line("train/loss", wb2, t, step, 2.0 - step / 100)))
    return out


def diverging() -> list[tuple[float, str]]:
    run = {"source": "tb", "run": "gpt-diverge", "host": "node2"}
    out = []
    for step in range(700):  # to the end of the data, so the run never looks stalled
        t = step * 10.0
        out.append((t, line("train/loss", run, t, step, 2.0 + 0.05 * max(0, step - 219))))
    return out


def distributed() -> list[tuple[float, str]]:
    out = []
    for i in range(0, 7000, 10):  # to the end of the data, so the job never looks stalled
        t = float(i)
        for rank in range(4):
            if rank == 2 and 3000 <= t < 3300:
                continue  # rank 2 ends no step for 5 minutes while the others go on
            if 2200 <= t < 2900:
                continue  # no rank ends a step for 11 minutes: a collective that hangs
            labels = {"source": "raw", "run": "ddp-4", "host": f"node{3 + rank // 2}", "rank": str(rank)}
            slow = 1000 <= t < 2000  # rank 3 works twice as long a step for 1000 s: every rank waits for it
            out.append((t, line("train/step_time", labels, t, i // 10, 2.0 if slow else 1.0)))
            busy = 1.0 if slow and rank == 3 else 0.5
            out.append((t, line("train/step_busy", labels, t, i // 10, busy)))
    return out


def slurm() -> list[tuple[float, str]]:
    out = []
    waiting = {
        "source": "jobs",
        "run": "12345",
        "slurm_job_id": "12345",
        "job_name": "sweep-7",
        "user": "alice",
        "partition": "gpu",
    }
    for i in range(0, 7000, 300):
        out.append((float(i), line("slurm.job.pending", waiting, float(i), None, i + 3600.0)))
    job = {
        "source": "jobs",
        "run": "12346",
        "slurm_job_id": "12346",
        "job_name": "gpt-oom",
        "user": "alice",
        "partition": "gpu",
    }
    out.append((3000.0, line("run.started", job, 3000.0, None, 1.0)))
    for i in range(3000, 5200, 300):
        out.append((float(i), line("slurm.job.elapsed", job, float(i), None, i - 3000.0)))
    out.append((5200.0, line("run.exit_code", job, 5200.0, None, -125.0)))
    out.append((5200.0, line("run.crashed", job, 5200.0, None, 1.0)))
    out.append((5200.0, line("run.finished", job, 5200.0, None, 1.0)))
    end = {**job, "state": "OUT_OF_MEMORY", "exit_code": "-125"}
    out.append((5200.0, line("slurm.job.end", end, 5200.0, None, 1.0)))
    return out


def main() -> None:
    rows = sorted(training() + gpus() + diverging() + distributed() + slurm(), key=lambda r: r[0])
    OUT.write_text("".join(text + "\n" for _, text in rows))
    print(f"wrote {len(rows)} samples to {OUT}")


if __name__ == "__main__":
    main()
