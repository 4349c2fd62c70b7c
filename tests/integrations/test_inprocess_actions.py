"""In-process actions in real trainings: alertd's lr_scale halves a HF run's LR in place (at most `at_most` times),
skip_step drops exactly one update, save saves, and the guard drops a NaN step on its own (HF Trainer, Lightning;
the plain torch loop is in test_torchloop.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from inprocess_run import GUARD_NAN, SKIP_AT, SPIKES
from integ_helpers import TIMEOUT, markers, read_samples, series, start

RULES = """
sources: [{{name: raw, type: samples, path: "{samples}", interval: 0.1s}}]
notifiers:
  console: {{type: log}}
  cut_lr: {{type: lr_scale, base_dir: "{base}", path: "{{run}}/alertd-commands",
           factor: 0.5, min_lr: 1e-6, at_most: 2, wait: 30s}}
route:
  receivers: [console]
  group_wait: 0s
  routes: [{{match: {{rule: grad_spike}}, receivers: [console, cut_lr]}}]
rules:
  - {{name: grad_spike, metric: train/grad_norm, labels_match: {{source: raw}}, condition: "> 100", severity: warning}}
"""


def test_alertd_lr_scale_halves_a_real_hf_runs_lr_in_place_at_most_twice(tmp_path: Path) -> None:
    """Three grad-norm spikes (> 100) in a real HF Trainer run: alertd, reading the callback's samples file, sends
    lr_scale; the Trainer's own log history shows its LR halved twice (no restart), and the third is refused."""
    out = tmp_path / "runs" / "spiky"
    out.mkdir(parents=True)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(samples=out / "alertd-samples.jsonl", base=tmp_path / "runs"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALERTD_")}
    with open(tmp_path / "alertd.log", "wb") as log:
        alertd = subprocess.Popen(
            [sys.executable, "-m", "alertd", "run", "--rules", str(rules), "--state-dir", str(tmp_path / "state")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + TIMEOUT
        while "alertd started" not in (tmp_path / "alertd.log").read_text():  # reading the samples file
            assert alertd.poll() is None and time.monotonic() < deadline, (tmp_path / "alertd.log").read_text()
            time.sleep(0.05)
        child = start("inprocess_run.py", out, "hf_spike")
        try:
            assert child.wait_exit() == 0, child.log[-3000:]
        finally:
            child.kill()
        deadline = time.monotonic() + 30
        while "at_most 2 reached" not in (tmp_path / "alertd.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        alertd.terminate()
        alertd.wait(30)
    said = (tmp_path / "alertd.log").read_text()
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    lrs = {h["step"]: h["learning_rate"] for h in history if "learning_rate" in h}
    norms = {h["step"]: h["grad_norm"] for h in history if "grad_norm" in h}
    assert [s for s, n in sorted(norms.items()) if n > 100] == list(SPIKES)
    changes = [(s, lrs[s]) for s in sorted(lrs) if s > 1 and lrs[s] != lrs[s - 1]]
    assert [lr for _, lr in changes] == [5e-4, 2.5e-4], (changes, said[-3000:])
    assert SPIKES[0] < changes[0][0] < SPIKES[1] < changes[1][0] < SPIKES[2]
    assert lrs[max(lrs)] == 2.5e-4  # and no third halving after the third spike
    acks = [json.loads(p.read_text()) for p in sorted((out / "alertd-commands").glob("*.ack"))]
    assert [(a["action"], a["applied"], a["old_lr"], a["new_lr"]) for a in acks] == [
        ("lr_scale", True, 1e-3, 5e-4),
        ("lr_scale", True, 5e-4, 2.5e-4),
    ]
    assert len(list((out / "alertd-commands").glob("*.cmd.done"))) == 2
    assert f"the trainer scaled its LR 0.001 -> 0.0005 at step {acks[0]['step']}" in said
    assert f"the trainer scaled its LR 0.0005 -> 0.00025 at step {acks[1]['step']}" in said
    assert "REFUSED: at_most 2 reached for this run" in said
    samples = read_samples(out / "alertd-samples.jsonl")
    assert series(samples, "train/lr") == {acks[0]["step"]: 5e-4, acks[1]["step"]: 2.5e-4}


def run_script(out: Path, mode: str) -> None:
    """Run `inprocess_run.py OUT MODE` to its end; it must succeed."""
    child = start("inprocess_run.py", out, mode)
    try:
        assert child.wait_exit(TIMEOUT) == 0, child.log[-3000:]
    finally:
        child.kill()


def test_skip_step_and_save_commands_in_a_real_hf_run(tmp_path: Path) -> None:
    """skip_step after step SKIP_AT drops exactly the next update (weights equal across it, not across the others);
    save saves the Trainer's regular checkpoint with finite weights, recorded in the ledger; both acknowledged."""
    out = tmp_path / "hfskip"
    run_script(out, "hf_skip")
    weights = {int(k): v for k, v in json.loads((out / "weights.json").read_text()).items()}
    same = [s for s in range(2, 11) if weights[s] == weights[s - 1]]
    assert same == [SKIP_AT + 1]
    acks = {a["action"]: a for a in (json.loads(p.read_text()) for p in (out / "alertd-commands").glob("*.ack"))}
    assert acks["skip_step"]["applied"] and acks["skip_step"]["step"] == SKIP_AT + 1
    assert acks["save"]["applied"] and acks["save"]["checkpoint"] == str(out / f"checkpoint-{SKIP_AT}")
    assert (out / f"checkpoint-{SKIP_AT}").is_dir()
    ledger = [json.loads(x) for x in (out / "alertd-checkpoints.jsonl").read_text().splitlines()]
    assert [(e["step"], e["by"], e["finite"]) for e in ledger] == [(SKIP_AT, "command", True)]
    samples = read_samples(out / "alertd-samples.jsonl")
    assert series(samples, "train/step_skipped") == {SKIP_AT + 1: 1.0}
    assert not list((out / "alertd-commands").glob("*.cmd"))  # all done
    assert markers(samples)[-1][0] == "run.finished"


def test_hf_guard_drops_a_nan_step_on_its_own(tmp_path: Path) -> None:
    """HF Trainer with Guard(sigma=6, window=10): the NaN-loss step is dropped (weights equal across it and finite
    after it), logged as train/step_skipped with the reason; the run goes on to its last step."""
    out = tmp_path / "hfguard"
    run_script(out, "hf_guard")
    weights = {int(k): v for k, v in json.loads((out / "weights.json").read_text()).items()}
    assert [s for s in range(2, 21) if weights[s] == weights[s - 1]] == [GUARD_NAN]
    assert all(math.isfinite(w) for w in weights.values()) and max(weights) == 20
    samples = read_samples(out / "alertd-samples.jsonl")
    (skipped,) = [s for s in samples if s["metric"] == "train/step_skipped"]
    assert (skipped["step"], skipped["labels"]["reason"]) == (GUARD_NAN, "guard")
    assert "loss is nan" in skipped["labels"]["why"]
    assert math.isnan(series(samples, "train/loss")[GUARD_NAN])


def test_lightning_guard_drops_a_nan_step_and_takes_commands(tmp_path: Path) -> None:
    """Lightning with Guard(sigma=6, window=10): the NaN-loss step is dropped on its own (weights equal across it,
    finite at the end) and logged as train/step_skipped; lr_scale halves the optimizer's LR at once; skip_step drops
    the next update."""
    out = tmp_path / "lightning"
    run_script(out, "lightning")
    weights = {int(k): v for k, v in json.loads((out / "weights.json").read_text()).items()}
    lrs = {int(k): v for k, v in json.loads((out / "lrs.json").read_text()).items()}
    assert json.loads((out / "finite.json").read_text()) is True
    # Lightning's step N (0-based) is the update that makes global_step N + 1.
    assert [s for s in range(2, 21) if weights[s] == weights[s - 1]] == [7, GUARD_NAN + 1]
    assert {lrs[s] for s in range(1, 6)} == {0.1} and {lrs[s] for s in range(6, 21)} == {0.05}
    samples = read_samples(out / "alertd-samples.jsonl")
    skipped = [(s["step"], s["labels"]["reason"]) for s in samples if s["metric"] == "train/step_skipped"]
    assert skipped == [(6, "command"), (GUARD_NAN, "guard")]
    assert series(samples, "train/lr") == {6: 0.05}
