"""`recover` under `alertd exec`: a NaN at update 40 rolls the real run back to its last finite checkpoint, skips
the planned updates, halves the LR and goes on to the end, after exactly one restart; a fault no rollback gets
past gives up after `max_attempts` with a page, the last good checkpoint intact; a CUDA OOM never restarts; an
alertd SIGKILLed during a recovery starts the planned attempt once when started again. Real alertd processes,
real trainings (HF Trainer, Lightning, a plain torch loop), real signals, a real webhook receiver."""

from __future__ import annotations

import ast
import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from alertd.integrations.ledger import read as read_ledger
from alertd.testing.receiver import Receiver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "recover"
PACE = ["--pace", "0.05"]
"""Each step as long as 50 ms at least, as a real one: alertd acts within a few of them."""
RULES = """
sources:
  - {{name: train, type: samples, path: "{samples}", interval: 0.2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
  back: {{type: recover, lr_scale: 0.5, max_attempts: {max_attempts}, backoff: {backoff}, wait: 20s}}
route:
  receivers: [hook]
  group_by: [rule, run, attempt]
  group_wait: 0s
  routes: [{{match: {{rule: loss_not_finite}}, receivers: [back], continue: true}}, {{receivers: [hook]}}]
rules:
  - name: loss_not_finite
    metric: [train/loss, train/grad_norm]
    labels_match: {{source: train}}
    condition: nonfinite
    severity: critical
"""


@pytest.fixture
def receiver():  # type: ignore[no-untyped-def]
    r = Receiver()
    yield r
    r.stop()


def exec_cmd(
    tmp_path: Path, receiver: Receiver, child: list[str], max_attempts: int = 3, backoff: str = "0s"
) -> list[str]:
    samples = tmp_path / "out" / "alertd-samples.jsonl"  # the callbacks' raw values, their steps exact
    rules = RULES.format(url=receiver.url, max_attempts=max_attempts, backoff=backoff, samples=samples)
    (tmp_path / "rules.yaml").write_text(rules)
    return [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "state", "--run", "t",
            "--", *child]  # fmt: skip


def run(tmp_path: Path, receiver: Receiver, child: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    cmd = exec_cmd(tmp_path, receiver, child, **kw)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def reports(receiver: Receiver) -> list[str]:
    """The summaries of the recover reports the webhook got, in order."""
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    out = []
    for body in bodies:
        for alert in body["alerts"]:
            if alert["labels"].get("action") == "recover":
                out.append(alert["annotations"].get("summary", ""))
    return out


def hf_logs(stdout: str) -> list[list[dict[str, Any]]]:
    """The Trainer's printed per-step logs, one list per attempt (split at the child's `attempt=` line)."""
    attempts: list[list[dict[str, Any]]] = []
    for line in stdout.splitlines():
        if line.startswith("attempt="):
            attempts.append([])
        elif line.startswith("{'loss'") and attempts:
            attempts[-1].append({k: float(v) for k, v in ast.literal_eval(line).items()})  # '0.001', 'nan'
    return attempts


def skipped(out: Path) -> list[tuple[int, str]]:
    """(step, reason) of each `train/step_skipped` the callbacks recorded."""
    rows = [json.loads(line) for line in (out / "alertd-samples.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], r["labels"]["reason"]) for r in rows if r["metric"] == "train/step_skipped"]


def printed_lrs(stdout: str) -> list[set[float]]:
    """The LRs the child printed with each update it trained (`step=<u> loss=<x> lr=<lr>`), one set per attempt."""
    attempts: list[set[float]] = []
    for line in stdout.splitlines():
        if line.startswith("attempt="):
            attempts.append(set())
        elif (m := re.fullmatch(r"step=\d+ loss=\S+ lr=(\S+)", line)) and attempts:
            attempts[-1].add(float(m.group(1)))
    return attempts


FRAMEWORKS = {
    # child script, the checkpoint resumed from, the updates skipped (through the one after the incident's
    # step), the step the samples give update u: HF gives update 40's loss step 40, Lightning and the loop 39.
    "hf": ("hf_train.py", "checkpoint-30", (31, 41), 0),
    "lightning": ("lightning_train.py", "ckpt/epoch=0-step=30.ckpt", (31, 40), 1),
    "torch": ("loop_train.py", "alertd-step=30.pt", (31, 40), 1),
}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_real_run_with_a_nan_at_update_40_is_rolled_back_and_runs_to_its_end(
    tmp_path: Path, receiver: Receiver, framework: str
) -> None:
    pytest.importorskip({"hf": "transformers", "lightning": "lightning", "torch": "torch"}[framework])
    script, resumed, (first_skip, last_skip), before = FRAMEWORKS[framework]
    out = tmp_path / "out"
    done = run(tmp_path, receiver, [sys.executable, str(EXAMPLES / script), str(out), "--nan-at", "40", *PACE])
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("attempt=")] == [
        "attempt=1 resume_from=None",
        f"attempt=2 resume_from={out / resumed}",
    ], done.stdout[-3000:]
    assert [line for line in lines if line.startswith("done at")][-1] == "done at step 60 finite=True"
    # The LR, as the trainer itself logged it: 1e-3 before, halved after the rollback.
    if framework == "hf":
        first, second = hf_logs(done.stdout)
        assert math.isnan(first[39]["grad_norm"])  # update 40's NaN, as the Trainer printed it
        assert len(second) == 30 and all(math.isfinite(log["grad_norm"]) for log in second)
        lrs = [{log["learning_rate"] for log in part} for part in (first, second)]
    else:
        lrs = printed_lrs(done.stdout)
    assert lrs == [{0.001}, {0.0005}]
    # The planned updates were not trained on; the rest were, to the last one.
    assert skipped(out) == [(u - before, "plan") for u in range(first_skip, last_skip + 1)]
    said = reports(receiver)
    assert said[0].endswith(
        f"stopping the run to restart it: attempt 2: back to {out / resumed} (step 30), updates "
        f"{first_skip}-{last_skip} skipped, LR x0.5"
    ), said
    assert said[1].endswith(f"attempt 2 resumed from {out / resumed} at step 30, LR 0.001 -> 0.0005"), said
    assert done.stderr.count("alertd exec: started") == 2
    ledger = read_ledger(out)
    assert all(e["finite"] for e in ledger if e["saved"])  # no NaN weights were ever saved
    assert any(e["step"] == 60 and e["saved"] for e in ledger) or framework == "lightning"


def test_a_fault_no_rollback_gets_past_gives_up_after_max_attempts_with_a_page(
    tmp_path: Path, receiver: Receiver
) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "out"
    child = [sys.executable, str(EXAMPLES / "hf_train.py"), str(out), "--nan-from", "40", *PACE]
    done = run(tmp_path, receiver, child, max_attempts=2)
    starts = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("attempt=")]
    assert starts == ["attempt=1", "attempt=2", "attempt=3"], done.stderr[-4000:]
    said = reports(receiver)
    assert "GAVE UP, the run is stopped for good: gave up after 2 recoveries (max_attempts: 2)" in said[-1], said
    assert sum("stopping the run to restart it" in s for s in said) == 2
    assert "widened" in said[2]  # the second incident, at about the same step: a wider plan
    # The last good checkpoint is intact: in the ledger, finite, on disk; no NaN weights were ever saved.
    entries = read_ledger(out)
    good = [e for e in entries if e["finite"] and e["saved"]]
    assert good and Path(good[-1]["path"]).is_dir()
    import torch
    from safetensors.torch import load_file

    weights = load_file(str(Path(good[-1]["path"]) / "model.safetensors"))
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    assert not any(e["saved"] and not e["finite"] for e in entries)


OOM_CHILD = r"""
import json, os, sys, time
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
print(f"attempt={os.environ.get('ALERTD_ATTEMPT')}", flush=True)
time.sleep(1.0)
os.makedirs("out", exist_ok=True)
with open("out/alertd-samples.jsonl", "a") as f:
    labels = {"run": "out", "pid": str(os.getpid())}
    f.write(json.dumps({"metric": "train/loss", "labels": labels, "time": time.time(), "step": 3, "value": "NaN"}))
    f.write("\n")
for _ in range(600):
    if os.path.exists(os.environ["ALERTD_STOP_FILE"]):
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""


def test_an_attempt_that_ran_out_of_cuda_memory_is_never_restarted(tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "oom.py").write_text(OOM_CHILD)
    done = run(tmp_path, receiver, [sys.executable, "oom.py"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("attempt=") == 1
    said = reports(receiver)
    assert len(said) == 1 and "GAVE UP" in said[0] and "cuda_oom" in said[0], said


def test_an_alertd_sigkilled_during_a_recovery_starts_the_planned_attempt_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    out = tmp_path / "out"
    child = [sys.executable, str(EXAMPLES / "loop_train.py"), str(out), "--nan-at", "40", *PACE]
    cmd = exec_cmd(tmp_path, receiver, child, backoff="60s")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stderr is not None and proc.stdout is not None
    said = ""
    while "attempt 2 in 1m" not in said:  # the plan is made and committed, the child stopped; alertd waits
        line = proc.stderr.readline()
        assert line, said[-3000:]
        said += line
    proc.send_signal(signal.SIGKILL)
    first_out = proc.stdout.read()
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    lines = (first_out + again.stdout).splitlines()
    assert [line for line in lines if line.startswith("attempt=")] == [
        "attempt=1 resume_from=None",
        f"attempt=2 resume_from={out / 'alertd-step=30.pt'}",
    ], (first_out + again.stdout)[-3000:]
    assert [line for line in lines if line.startswith("done at")][-1] == "done at step 60 finite=True"
    assert "a recovery was planned before alertd stopped" in again.stderr
    assert skipped(out) == [(u - 1, "plan") for u in range(31, 41)]
