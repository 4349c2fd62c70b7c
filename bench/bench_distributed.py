"""Benchmark of alertd on distributed runs: a hang to its alert with every rank's stack, the heartbeat's cost in
the trainer, and how fast the default `rank_straggler` names a slow rank.

Run as `python bench/bench_distributed.py`.

- Hang -> stacks: `tests/exec/test_exec_hang.py`'s job, `alertd exec -- torchrun --nproc_per_node=3` (Gloo, CPU),
  rank 2 asleep before an all_reduce, `runs: {stall_after: 3s}`, `job_hung` routed to a `stacks` action: from
  the hang (rank 0 reaching the all_reduce) to the report with the three stacks at a webhook, median of
  `BENCH_HANG_TRIALS` (5). The anchor is what a hung collective does by itself: NCCL's watchdog fires after its
  timeout, 10 minutes by default (Gloo's: 30).
- Heartbeat: the callbacks' `RunRecorder.step_end` (a `train/step_time` sample per step on every rank) timed
  over 20,000 steps, against a 10 ms step (the goal: under 1 % of it).
- Straggler: the default rules' `rank_straggler` (ratio of a rank's 2-minute mean step time to its job's median
  >= 1.5, for 5 minutes) replayed by the core over four ranks stepping every second, rank 3 turning 1.5x or 2x
  slower at t = 600 s: the seconds from the slowdown to the alert, beside the rule's own floor (`for:` 5 minutes
  plus the time the 2-minute mean takes to cross 1.5x).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "exec"))

from alertd.config import load_config  # noqa: E402
from alertd.dryrun import replay  # noqa: E402
from alertd.integrations.recorder import RunRecorder  # noqa: E402
from alertd.model import Sample, SeriesKey, TransitionKind, make_labels  # noqa: E402
from alertd.rules.evaluate import RuleSet  # noqa: E402

TRIALS = int(os.environ.get("BENCH_HANG_TRIALS", "5"))
NCCL_TIMEOUT = 600.0
STEP = 0.010


def hang() -> list[float]:
    from test_exec_hang import hang_to_stacks

    out = []
    for i in range(TRIALS):
        with tempfile.TemporaryDirectory() as d:
            took, summary, done = hang_to_stacks(Path(d))
            if done.returncode != 0 or "straggler_sleep" not in summary:
                raise SystemExit(f"bench_distributed: hang trial {i} failed: {summary}\n{done.stderr[-2000:]}")
            out.append(took)
    return out


def heartbeat() -> tuple[float, float]:
    """Seconds one `step_end` costs on a rank of a distributed run (its step time and busy time), and seconds the
    busy clock's hooks add to one backward pass of a 148-tensor model."""
    import torch

    os.environ.update(RANK="0", WORLD_SIZE="2")  # a rank: the recorder labels it and times its busy share
    try:
        with tempfile.TemporaryDirectory() as d:
            recorder = RunRecorder(Path(d) / "s.jsonl", Path(d) / "STOP", "r", signals=())
            recorder.start(d, 0)
            model = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(74)))
            x = torch.randn(2, 4)
            recorder.busy.last = time.perf_counter()  # step_end writes the busy time too
            n = 20_000
            began = time.perf_counter()
            for step in range(n):
                recorder.step_end(step)
                recorder.busy.last = time.perf_counter()
            took = (time.perf_counter() - began) / n
            rounds = []
            for _ in range(15):
                bare = _backward(model, x, 200)
                recorder.watch(model)
                _backward(model, x, 1)
                recorder.busy.settle()  # the first step's end: the last parameters' hooks stay
                hooked = _backward(model, x, 200)
                recorder.busy.close()
                rounds.append(hooked - bare)
            recorder.finish(n)
    finally:
        for name in ("RANK", "WORLD_SIZE"):
            os.environ.pop(name, None)
    return took, max(0.0, statistics.median(rounds))


def _backward(model: Any, x: Any, n: int) -> float:
    """Seconds one forward and backward pass of `model` takes, over `n`."""
    began = time.perf_counter()
    for _ in range(n):
        model(x).sum().backward()
    return (time.perf_counter() - began) / n


def straggler(slow: float) -> float | None:
    """Seconds from rank 3 working `slow` times as long (t = 600 s) to `rank_straggler` firing for it."""
    rules = [r for r in load_config([str(ROOT / "rules" / "default.yaml")], {}).rules if r.name == "rank_straggler"]
    samples = []
    labels = [make_labels({"source": "raw", "run": "job", "rank": str(r)}) for r in range(4)]
    keys = [SeriesKey("train/step_busy", x) for x in labels]
    t, step = 0.0, 0
    while t < 1800.0:
        factor = slow if t >= 600.0 else 1.0
        t += 0.5 * factor + 0.5  # the step ends when the slowest rank's gradients are in
        step += 1
        samples.extend(Sample(key, t, step, 0.5 * (factor if r == 3 else 1.0)) for r, key in enumerate(keys))
    for tr in replay(RuleSet(rules), samples, until=1800.0):
        if tr.state is TransitionKind.FIRING and dict(tr.labels).get("rank") == "3":
            return tr.time - 600.0
    return None


def main() -> None:
    """Print the benchmark lines."""
    hangs = hang()
    median = statistics.median(hangs)
    print(
        f"distributed: a hung collective (rank 2 of 3 asleep before an all_reduce) -> job_hung with every rank's "
        f"stack at the webhook: median {median:.2f} s (min {min(hangs):.2f}, max {max(hangs):.2f}, {TRIALS} runs; "
        f"stall_after 3 s); NCCL's watchdog by itself: {NCCL_TIMEOUT:.0f} s ({NCCL_TIMEOUT / median:.0f}x)"
    )
    beat, hooks = heartbeat()
    print(
        f"distributed: the heartbeat (train/step_time and train/step_busy on every rank) costs "
        f"{(beat + hooks) * 1e6:.1f} us a step ({beat * 1e6:.1f} us to write, {hooks * 1e6:.1f} us of gradient hooks "
        f"on 148 parameter tensors): {(beat + hooks) / STEP:.3%} of a 10 ms step (goal: under 1 %)"
    )
    for slow in (1.5, 2.0):
        found = straggler(slow)
        # for: 5m, and the 2-minute mean (the slow rank's samples enter it one by one) reaching 1.5x the median
        floor = 300.0 + 120.0 * 0.5 / (slow - 1)
        said = "never" if found is None else f"{found:.0f} s"
        print(
            f"distributed: rank_straggler names a rank {slow:g}x slower than its 3 peers after {said} "
            f"(the rule's floor: for 5m + the 2-minute mean crossing 1.5x = {floor:.0f} s)"
        )


if __name__ == "__main__":
    main()
