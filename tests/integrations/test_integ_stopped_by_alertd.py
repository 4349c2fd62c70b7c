"""The whole story: `alertd exec` runs a real HF Trainer and a real Lightning run with AlertdCallback; the
raw loss turns NaN, alertd's kill notifier (target child, first signal SIGINT) asks, the callback stops the run
at the next step and it ends cleanly: exit 0. The NaN loss made the weights NaN, so the stop saves no checkpoint
(these runs save none of their own: there is no good one either), and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alertd.integrations.ledger import read

WRITERS = Path(__file__).resolve().parents[1] / "writers"
RULES = """
sources: [{{name: raw, type: samples, path: "{samples}", interval: 0.2s}}]
notifiers:
  stop: {{type: kill, signals: [SIGINT, SIGTERM, SIGKILL], grace: 60s}}   # target: child, under exec
route: {{receivers: [stop], group_wait: 0s}}
rules:
  - {{name: raw_loss_nan, metric: train/loss, labels_match: {{source: raw}}, condition: nonfinite, severity: critical}}
"""


@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_alertd_stops_a_real_training_without_saving_nan_weights(tmp_path: Path, framework: str) -> None:
    samples = tmp_path / "alertd-samples.jsonl"
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(samples=samples))
    script = WRITERS / ("hf_trainer_run.py" if framework == "hf" else "lightning_run.py")
    out = tmp_path / "out"
    env = {**os.environ, "ALERTD_SAMPLES_FILE": str(samples), "TOKENIZERS_PARALLELISM": "false"}
    alertd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp_path / "state")]
    trainer = [sys.executable, str(script), str(out), "--steps", "3000", "--nan-at", "5", "--sleep", "0.02", "--alertd"]
    done = subprocess.run(
        [*alertd, "--", *trainer],
        capture_output=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"kill stop: sent SIGINT to pid" in done.stderr
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    (stopped,) = [x for x in lines if x["metric"] == "run.stopped"]
    assert stopped["labels"]["reason"] == "SIGINT"
    losses = [x for x in lines if x["metric"] == "train/loss"]
    assert losses[-1]["value"] == "NaN" and len(losses) < 3000  # stopped long before the end
    assert stopped["labels"]["saved"] == "false" and "checkpoint" not in stopped["labels"]
    assert b"weights not finite, no checkpoint saved; no good checkpoint is known" in done.stderr
    # No checkpoint of NaN weights; the ledger (HF: output_dir; Lightning: default_root_dir, the cwd) says why.
    assert not list(tmp_path.rglob("checkpoint-*")) and not list(tmp_path.rglob("*.ckpt"))
    (entry,) = read(out if framework == "hf" else tmp_path)
    assert (entry["step"], entry["finite"], entry["saved"], entry["by"]) == (stopped["step"], False, False, "stop")
