"""A hang under `alertd exec -- torchrun`: rank 2 of three sleeps before an `all_reduce`, so every rank waits; the
job's run stalls (`run.hung`), `job_hung` fires within `stall_after` + 5 s, and the `stacks` action's report reaches the
webhook with each rank's stack (rank 2 in its sleep, ranks 0 and 1 in `all_reduce`); the job then goes on and
finishes. Real alertd, real torchrun (Gloo, CPU), a real webhook receiver."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from alertd.testing.receiver import Receiver

JOB = Path(__file__).resolve().parents[1] / "integrations" / "stacks_loop_run.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
STALL_AFTER = 3.0
SLEEP = 14.0
RULES = """
sources:
  - {{name: train, type: samples, path: "{samples}", interval: 0.2s}}
runs: {{stall_after: {stall}s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
  dump: {{type: stacks, target: child}}
route:
  receivers: [hook]
  group_by: [rule, run]
  group_wait: 0s
  routes: [{{match: {{rule: job_hung}}, receivers: [dump], continue: true}}, {{receivers: [hook]}}]
rules:
  - {{name: job_hung, metric: run.hung, labels_match: {{source: train}}, condition: "> 0", severity: critical}}
"""


def stacks_report(receiver: Receiver) -> tuple[float, str] | None:
    """When the stacks report reached the webhook (time.time()) and its summary."""
    with receiver.recorder.lock:
        got = list(zip(receiver.recorder.bodies, receiver.recorder.arrivals, strict=True))
    for body, arrived in got:
        for alert in body["alerts"]:
            if alert["labels"].get("action") == "stacks":
                return time.time() - (time.monotonic() - arrived), alert["annotations"].get("summary", "")
    return None


def hang_to_stacks(tmp_path: Path) -> tuple[float, str, subprocess.CompletedProcess[str]]:
    """Run the job under alertd exec; seconds from the hang (rank 0 reaching the all_reduce rank 2 is late for)
    to the stacks report at the webhook, its summary, and alertd exec's result."""
    receiver = Receiver()
    try:
        out = tmp_path / "out"
        out.mkdir()
        rules = RULES.format(samples=out / "alertd-samples.jsonl", stall=STALL_AFTER, url=receiver.url)
        (tmp_path / "rules.yaml").write_text(rules)
        cmd = [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "state", "--run", "j"]
        job = [str(TORCHRUN), "--standalone", "--nproc_per_node=3", str(JOB), str(out), "12", "4", str(SLEEP)]
        done = subprocess.run([*cmd, "--", *job], capture_output=True, text=True, timeout=180, cwd=tmp_path)
        report = stacks_report(receiver)
        assert report is not None, done.stderr[-4000:]
        hung = float((out / "AT.rank0").read_text())
        return report[0] - hung, report[1], done
    finally:
        receiver.stop()


def test_a_hung_torchrun_job_is_alerted_with_every_ranks_stack_and_goes_on(tmp_path: Path) -> None:
    took, summary, done = hang_to_stacks(tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert took < STALL_AFTER + 5.0, (took, summary)
    where = dict(re.findall(r"rank (\d+) \(pid \d+\) in (\S+) .*?\[py-spy\]", summary))
    assert where == {"0": "all_reduce", "1": "all_reduce", "2": "straggler_sleep"}, summary
    assert all((tmp_path / "out" / f"DONE.rank{r}").exists() for r in range(3))  # the capture took nothing away
