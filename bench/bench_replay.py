"""Benchmark of `alertd dry-run` of rules/default.yaml over 1,000,000 scalars, beside its anchor: TensorBoard's Rust
data server loading the same file plus pandas computing the same windows.

Run as `python bench/bench_replay.py [DIR]` (`make bench` runs it; DIR: build the files there once, reuse them).
The files are `bench_ingest.py`'s: "4-tag" (250,000 events of train/loss, train/grad_norm, train/lr,
train/tokens_per_second, TensorBoard's `EventFileWriter`) and "torch" (1,000,000 events of train/loss, torch's
`SummaryWriter`).

- alertd: what `alertd dry-run --rules rules/default.yaml --source tensorboard:DIR` does, in process: one
  `TensorBoardSource.read_new()` with the root run named after the directory (`root_run_name`, as the CLI does:
  the files' events are the logdir's root run), then `dryrun.replay` of the samples with the default rules
  (every rule, the run tracking, the `for:` machines): median of 3, wall clock; its parts (read, rules) are
  shown too.
- anchor: the Rust data server's load of the file (`bench_ingest.data_server`, the best of 3, its start-up left
  out) plus pandas computing what the default rules judge on these series, over the same numbers: per series,
  `isna`/`isinf` (nonfinite), `> 100` (grad_norm_exploding), the spike baselines as rolling medians of the
  samples before each one (loss_spike: 50 samples; loss_zeroed: 5; throughput_drop: the 5 minutes before,
  `rolling("300s", closed="left")`), loss_diverging's rolling means (20 samples over the 200 before), each
  compared with its ratio; median of 3.

The goal (issue "Performance"): alertd within 1.5x of the anchor. Nothing is asserted on timings (the results
of the running windows are the from-scratch ones: tests/core/test_spike_median.py, test_window_conditions.py,
test_judge_range.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import pandas as pd
from bench_ingest import SCALARS, TAGS, build_four_tag, build_torch, data_server, quick_records

from alertd.config import load_config
from alertd.dryrun import replay, root_run_name
from alertd.model import Sample
from alertd.rules.evaluate import RuleSet
from alertd.sources.config import TensorBoardConfig
from alertd.sources.tensorboard import TensorBoardSource

DEFAULT_RULES = Path(__file__).resolve().parents[1] / "rules" / "default.yaml"
ROUNDS = 3
GOAL = 1.5


def alertd_dry_run(logdir: str, ruleset: RuleSet) -> tuple[float, float, float, list[Sample]]:
    """One dry-run in process: (total, read, rules seconds, the samples read)."""
    t0 = time.perf_counter()
    source = TensorBoardSource(TensorBoardConfig(name="bench", type="tensorboard", logdir=logdir))
    source.root_run = root_run_name(logdir)  # as the CLI names the root run
    samples = source.read_new()
    t1 = time.perf_counter()
    for _ in replay(ruleset, samples):
        pass
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0, t2 - t1, samples


def series_of(samples: list[Sample]) -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """Per metric: (times, values) as numpy arrays, in time order."""
    by: dict[str, tuple[list[float], list[float]]] = {}
    for s in samples:
        times, values = by.setdefault(s.series.metric, ([], []))
        times.append(s.time)
        values.append(s.value)
    return {m: (np.asarray(t), np.asarray(v)) for m, (t, v) in by.items()}


def pandas_windows(series: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]) -> float:
    """What the default rules compute on these series, with pandas: seconds."""
    t0 = time.perf_counter()
    for metric, (times, values) in series.items():
        s = pd.Series(values)
        finite = s.where(np.isfinite(values))
        if metric.endswith("loss"):
            _ = s.isna() | np.isinf(values)
            base = finite.rolling(50, min_periods=5).median().shift(1)
            _ = (finite / base >= 2.0) & (base > 0)
            zero = finite.rolling(5, min_periods=3).median().shift(1)
            _ = (finite / zero <= 0.001) & (zero > 0)
            recent = finite.rolling(20).mean()
            before = finite.rolling(200).mean().shift(20)
            _ = (recent / before > 1.5) & (before > 0)
        elif metric.endswith("grad_norm"):
            _ = (s > 100) | s.isna() | np.isinf(values)
        elif "tokens_per_second" in metric:
            timed = pd.Series(finite.to_numpy(), index=pd.to_datetime(times, unit="s"))
            base = timed.rolling("300s", closed="left", min_periods=5).median()
            _ = (timed / base <= 0.5) & (base > 0)
    return time.perf_counter() - t0


def compare(name: str, logdir: str, last_steps: dict[str, int], ruleset: RuleSet) -> None:
    runs = []
    samples: list[Sample] = []
    for _ in range(ROUNDS):
        total, read, rules, samples = alertd_dry_run(logdir, ruleset)
        runs.append((total, read, rules))
    series = series_of(samples)
    del samples
    server = min((data_server(logdir, last_steps) for _ in range(ROUNDS)), key=lambda r: r["read"])
    windows = [pandas_windows(series) for _ in range(ROUNDS)]
    pd_time = statistics.median(windows)
    total = statistics.median(r[0] for r in runs)
    read = statistics.median(r[1] for r in runs)
    rules = statistics.median(r[2] for r in runs)
    anchor = server["read"] + pd_time
    print(
        f"dry-run {name} 1M scalars, rules/default.yaml: alertd {total:.2f} s (read {read:.2f} s + rules "
        f"{rules:.2f} s); anchor {anchor:.2f} s (Rust data server load {server['read']:.2f} s + pandas rolling "
        f"{pd_time:.2f} s): {total / anchor:.1f}x (goal <= {GOAL:g}x); the rules' part beside pandas: "
        f"{rules / pd_time:.1f}x",
        flush=True,
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("alertd").setLevel(logging.ERROR)
    ruleset = RuleSet(load_config([str(DEFAULT_RULES)]).rules)
    keep = sys.argv[1] if len(sys.argv) > 1 else None
    with contextlib.ExitStack() as stack:
        root = keep or stack.enter_context(tempfile.TemporaryDirectory())
        four, torch_dir = os.path.join(root, "four_tag"), os.path.join(root, "torch")
        with quick_records():
            if not os.path.isdir(four):
                os.makedirs(four)
                build_four_tag(four)
            if not os.path.isdir(torch_dir):
                os.makedirs(torch_dir)
                build_torch(torch_dir)
        last = SCALARS // len(TAGS) - 1
        compare("4-tag", four, dict.fromkeys(TAGS, last), ruleset)
        compare("torch", torch_dir, {"train/loss": SCALARS - 1}, ruleset)


if __name__ == "__main__":
    main()
