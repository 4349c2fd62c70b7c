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


def heartbeat() -> float:
    """Seconds one `step_end` costs."""
    with tempfile.TemporaryDirectory() as d:
        recorder = RunRecorder(Path(d) / "s.jsonl", Path(d) / "STOP", "r", signals=())
        recorder.start(d, 0)
        n = 20_000
        began = time.perf_counter()
        for step in range(n):
            recorder.step_end(step)
        took = (time.perf_counter() - began) / n
        recorder.finish(n)
    return took


def straggler(slow: float) -> float | None:
    """Seconds from rank 3 turning `slow` times slower (t = 600 s) to `rank_straggler` firing for it."""
    rules = [r for r in load_config([str(ROOT / "rules" / "default.yaml")], {}).rules if r.name == "rank_straggler"]
    samples = []
    for rank in range(4):
        labels = make_labels({"source": "raw", "run": "job", "rank": str(rank)})
        t, step = 0.0, 0
        while t < 1800.0:
            took = slow if rank == 3 and t >= 600.0 else 1.0
            t += took
            step += 1
            samples.append(Sample(SeriesKey("train/step_time", labels), t, step, took))
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
    beat = heartbeat()
    print(
        f"distributed: the heartbeat (train/step_time on every rank) costs {beat * 1e6:.1f} us a step: "
        f"{beat / STEP:.3%} of a 10 ms step (goal: under 1 %)"
    )
    for slow in (1.5, 2.0):
        found = straggler(slow)
        # for: 5m, and the 2-minute mean (of samples: the slow rank's come `slow` s apart) reaching 1.5x
        floor = 300.0 + 40.0 / (1 - 1 / slow)
        said = "never" if found is None else f"{found:.0f} s"
        print(
            f"distributed: rank_straggler names a rank {slow:g}x slower than its 3 peers after {said} "
            f"(the rule's floor: for 5m + the 2-minute mean crossing 1.5x = {floor:.0f} s)"
        )


if __name__ == "__main__":
    main()
