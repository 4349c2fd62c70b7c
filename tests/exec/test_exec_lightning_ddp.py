"""`alertd exec -- python lightning_ddp_child.py`: a Lightning DDP run (CPU, `devices=2`, Gloo; Lightning starts
rank 1 itself) whose rank 1 alone has a NaN loss is stopped by alertd at one step on every rank, and no NaN
weights are saved. Real alertd exec with a `samples` source on the callbacks' file and `loss_not_finite` routed to
a stop as the exec stop's (stop file, then signals), real Lightning processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

HERE = Path(__file__).resolve().parent
CHILD = HERE / "lightning_ddp_child.py"
RULES = """
sources:
  - {{name: train, type: samples, path: "{samples}", interval: 0.2s}}
notifiers:
  console: {{type: log}}
  stop:
    type: kill
    target: child
    signals: [SIGINT, SIGTERM]
    grace: 30s
    ask_first: {{stop_file: "{stop_file}", wait: 30s}}
route:
  receivers: [console]
  group_by: [rule, run]
  group_wait: 0s
  routes: [{{match: {{rule: loss_not_finite}}, receivers: [console, stop]}}]
rules:
  - name: loss_not_finite
    metric: [train/loss]
    labels_match: {{source: train}}
    condition: nonfinite
    severity: critical
"""
_UNSET = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def test_a_nan_on_one_lightning_ddp_rank_stops_every_rank_at_one_step_and_no_nan_weights_are_saved(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # the callbacks' defaults under default_root_dir: their samples file, their stop file
    rules = RULES.format(samples=out / "alertd-samples.jsonl", stop_file=out / "ALERTD_STOP")
    (tmp_path / "rules.yaml").write_text(rules)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _UNSET and not k.startswith("ALERTD_") and not k.startswith("SLURM_")
    }
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "state", "--run", "l"]
    done = subprocess.run(
        [*cmd, "--", sys.executable, str(CHILD), str(out)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env=env,
    )
    stdout, err = done.stdout, done.stderr
    assert done.returncode == 0, err[-4000:]
    stops = dict(re.findall(r"rank=(\d) stopped at step (\d+)", stdout))
    assert sorted(stops) == ["0", "1"] and len(set(stops.values())) == 1, stdout[-3000:] + err[-3000:]
    step = int(stops["0"])
    assert 8 < step < 60, (step, err[-3000:])  # stopped by alertd, after the NaN, before max_steps
    fired = [line for line in err.splitlines() if line.startswith("alertd notify receiver=console")]
    assert any("loss_not_finite" in line and "status=firing" in line for line in fired), err[-4000:]
    ledger = [json.loads(line) for line in (out / "alertd-checkpoints.jsonl").read_text().splitlines()]
    assert ledger and not [e for e in ledger if e["saved"] and not e["finite"]], ledger
    assert all(not e["saved"] for e in ledger), ledger  # every save came after the NaN
    vetoes = [e for e in ledger if e["by"] == "stop"]
    assert len(vetoes) == 1 and vetoes[0]["step"] == step and not vetoes[0]["finite"], ledger  # one, by rank 0
    assert not list(out.rglob("*.ckpt"))
    samples = [json.loads(line) for line in (out / "alertd-samples.jsonl").read_text().splitlines()]
    losses = [s for s in samples if s["metric"] == "train/loss"]
    assert {s["labels"].get("rank") for s in losses} == {"0", "1"}, losses[:4]
    assert all(s["labels"].get("world_size") == "2" for s in samples), samples[:4]
    nan_ranks = {s["labels"]["rank"] for s in losses if s["value"] == "NaN" and s["step"] == 8}
    assert nan_ranks == {"1"}, losses  # the NaN came from rank 1 alone
    stopped = [s for s in samples if s["metric"] == "run.stopped"]
    assert sorted(s["labels"]["rank"] for s in stopped) == ["0", "1"] and {s["step"] for s in stopped} == {step}
    assert all(s["labels"].get("saved") == "false" for s in stopped), stopped
