"""A straggler named from a real torchrun job: rank 1 of three does twice the others' work a step (Gloo, CPU).

In a synchronous job (DDP) every rank waits for the slowest in the gradient all-reduce, so all three ranks'
`train/step_time` are alike; their `train/step_busy` (the share of a step before the wait) is not. The rules are
the default `rank_straggler`'s, with windows shortened to the job's few seconds; they are replayed over the
samples file by `alertd dry-run`, as a user checks a rule against a past run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from integ_helpers import HERE, read_samples

TORCHRUN = Path(sys.executable).with_name("torchrun")
ALERTD = Path(sys.executable).with_name("alertd")
ROOT = Path(__file__).resolve().parents[2]


def _straggler_rule(metric: str) -> dict[str, object]:
    """The default rules' rank_straggler on `metric`, over 1 s for 1 s instead of 2m and 5m."""
    rules = yaml.safe_load((ROOT / "rules" / "default.yaml").read_text())["rules"]
    (rule,) = [r for r in rules if r["name"] == "rank_straggler"]
    assert rule["metric"] == "train/step_busy"
    rule = {**rule, "name": f"straggler_on_{metric.split('/')[1]}", "metric": metric, "for": "1s"}
    rule["condition"] = {"peers": {**rule["condition"]["peers"], "over": "1s"}}
    return rule


def test_the_rank_twice_as_slow_is_named_by_its_busy_time_and_no_other(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ALERTD_SAMPLES_FILE")}
    env["OMP_NUM_THREADS"] = "1"
    job = [str(TORCHRUN), "--nproc_per_node=3", "--standalone", str(HERE / "ranks_loop_run.py"), str(tmp_path)]
    proc = subprocess.run([*job, "120", "1"], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    samples = tmp_path / "alertd-samples.jsonl"
    busy: dict[str, list[float]] = {}
    for s in read_samples(samples):
        if s["metric"] == "train/step_busy":
            busy.setdefault(s["labels"]["rank"], []).append(float(s["value"]))  # type: ignore[index, arg-type]
    assert sorted(busy) == ["0", "1", "2"] and all(len(v) == 120 for v in busy.values())

    rules = tmp_path / "rules.yaml"
    both = [_straggler_rule("train/step_busy"), _straggler_rule("train/step_time")]
    rules.write_text(yaml.safe_dump({"rules": both}))
    out = subprocess.run(
        [str(ALERTD), "dry-run", "--rules", str(rules), "--source", f"samples:{samples}", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    transitions = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    firing = {(t["rule"], t["labels"]["rank"]) for t in transitions if t["state"] == "firing"}
    # the busy time names rank 1 and no other; the step time, alike on every rank, names nobody
    assert firing == {("straggler_on_step_busy", "1")}, transitions


def test_the_busy_clock_keeps_the_hooks_of_the_last_gradients_after_the_first_step() -> None:
    import time

    import torch

    from alertd.integrations.busy import KEEP, BusyClock

    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(10)))  # 20 parameter tensors
    clock = BusyClock()
    assert clock.watch(model) == 20
    start = time.perf_counter()
    assert clock.since(start) is None  # no gradient yet
    model(torch.ones(1, 2)).sum().backward()
    first = clock.since(start)
    assert first is not None and first > 0
    clock.settle()
    assert len(clock._handles) == KEEP
    # the first layers' gradients come last in a backward pass: theirs stay hooked
    assert set(clock._handles) == {id(p) for layer in list(model)[: KEEP // 2] for p in layer.parameters()}
    again = time.perf_counter()
    model(torch.ones(1, 2)).sum().backward()
    assert clock.since(again) is not None
    clock.close()
    later = time.perf_counter()
    model(torch.ones(1, 2)).sum().backward()
    assert clock.since(later) is None and clock._handles == {}


def test_a_one_process_run_writes_no_busy_time(tmp_path: Path) -> None:
    import torch

    from alertd.integrations.torchloop import AlertdLoop

    env = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID") if k in os.environ}
    try:
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with AlertdLoop(optimizer, output_dir=tmp_path, model=model, run="one") as run:
            for step in range(3):
                model(torch.ones(1, 2)).sum().backward()
                run.update(step, 1.0, 1.0)
                optimizer.step()
                optimizer.zero_grad()
                run.boundary(step)
    finally:
        os.environ.update(env)
    metrics = [s["metric"] for s in read_samples(tmp_path / "alertd-samples.jsonl")]
    assert metrics.count("train/step_time") == 3 and "train/step_busy" not in metrics
