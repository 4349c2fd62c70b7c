"""alertd against a real local Slurm (slurm-wlm): the `slurm` notifier cancels a job that runs a real trainer,
and the `slurm` source turns job states into alerts and run states."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from service_helpers import Alertd, wait_for
from slurm_testkit import LocalSlurm

from alertd.testing.receiver import Receiver

TRAINER = r"""
import math, os, signal, sys, time
from pathlib import Path
from alertd.testing.tbwriter import ScalarWriter
from alertd.runs.writers import hold
work = Path(sys.argv[1])
stop = []
signal.signal(signal.SIGUSR1, lambda *a: stop.append(1))
w = ScalarWriter(work / "runs" / "exp1")
w.flush()
held = hold(w.path)
for step in range(2000):
    loss = math.nan if step == 30 else 2.0 - step / 1000
    w.add_scalar("train/loss", loss, step)
    w.flush()
    if stop:
        (work / "checkpoint.pt").write_text(f"step {step} job {os.environ['SLURM_JOB_ID']}")
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""

RULES_TRAINER = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
  - {{name: jobs, type: slurm, interval: 0.5s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
  cancel: {{type: slurm, signal: SIGUSR1, grace: 30s}}
route:
  receivers: [hook]
  group_wait: 0s
  routes: [{{match: {{severity: critical}}, receivers: [hook, cancel]}}]
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
  - {{name: run_finished, metric: run.end, labels_match: {{reason: finished}}, condition: "> 0", severity: info}}
"""


def _alerts(receiver: Receiver) -> list[dict[str, Any]]:
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [a for b in bodies for a in b["alerts"] if a["status"] == "firing"]


def _actions(receiver: Receiver) -> list[str]:
    return [a["annotations"]["summary"] for a in _alerts(receiver) if a["labels"].get("action") == "slurm"]


def test_a_nan_in_a_slurm_job_signals_its_trainer_which_checkpoints_and_the_job_completes(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_TRAINER.format(logdir=tmp_path / "runs", url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state", env={"SLURM_CONF": str(slurm.conf)})
    try:
        alertd.wait_log("alertd started")
        trainer = tmp_path / "trainer.py"
        trainer.write_text(TRAINER)
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {trainer} {tmp_path}\n")
        env_path = os.pathsep.join(sys.path)
        job = slurm.sbatch("-J", "trainer", f"--export=ALL,PYTHONPATH={env_path}", str(script))
        # The job id came from the writer's environment (SLURM_JOB_ID), not from any label: the trainer
        # got SIGUSR1, saved its checkpoint and exited 0 before the grace ran out, so no scancel followed.
        assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 90) == "COMPLETED"
        text = (tmp_path / "checkpoint.pt").read_text()
        assert text.startswith("step 3") and text.endswith(f"job {job}")

        (summary,) = wait_for(lambda: _actions(receiver), "the slurm report at the webhook", 40, alertd)
        assert f"job {job} (writer pid" in summary
        assert "SIGUSR1 at" in summary and "scancel" not in summary and "the job ended COMPLETED" in summary
        nan = [a for a in _alerts(receiver) if a["labels"]["alertname"] == "loss_not_finite"]
        assert nan and nan[0]["labels"]["source"] == "tb"

        def finished() -> list[dict[str, Any]]:
            return [
                a
                for a in _alerts(receiver)
                if a["labels"]["alertname"] == "run_finished" and a["labels"].get("source") == "jobs"
            ]

        (done,) = wait_for(finished, "the Slurm job's run_finished alert", 30, alertd)
        assert done["labels"]["run"] == job and done["labels"]["exit_code"] == "0"
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()


RULES_JOBS = """
sources:
  - {{name: jobs, type: slurm, interval: 0.5s, jobs: ["t-*"]}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
  cancel: {{type: slurm, job_from: [label]}}
route:
  receivers: [hook]
  group_wait: 0s
  routes: [{{match: {{rule: idle_job}}, receivers: [hook, cancel]}}]
rules:
  - name: idle_job
    metric: slurm.job.elapsed
    labels_match: {{job_name: t-idle}}
    condition: "> 2"
    severity: warning
  - name: slurm_job_pending
    metric: slurm.job.pending
    condition: "> 1"
    severity: warning
  - name: slurm_job_failed
    metric: slurm.job.end
    labels_match: {{state: "=~FAILED|OUT_OF_MEMORY|TIMEOUT|NODE_FAIL|BOOT_FAIL|DEADLINE"}}
    condition: "> 0"
    severity: critical
    annotations:
      summary: "Slurm job {{{{ labels.slurm_job_id }}}} ({{{{ labels.job_name }}}}) ended {{{{ labels.state }}}}"
  - name: run_crashed
    metric: run.end
    labels_match: {{reason: "=~crashed|killed"}}
    condition: "> 0"
    severity: critical
"""


def test_job_states_raise_their_alerts_and_a_job_named_by_its_label_is_cancelled(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_JOBS.format(url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state", env={"SLURM_CONF": str(slurm.conf)})
    try:
        alertd.wait_log("alertd started")
        failed = slurm.sbatch("-J", "t-fail", "--wrap", "sleep 1; exit 3")
        hog = f"{sys.executable} -c 'x = bytearray(600 << 20); import time; time.sleep(5)'"
        oom = slurm.sbatch("-J", "t-oom", "--mem=50M", "--wrap", hog)
        held = slurm.sbatch("-J", "t-held", "--hold", "--wrap", "true")
        idle = slurm.sbatch("-J", "t-idle", "--wrap", "sleep 300")
        other = slurm.sbatch("-J", "other", "--wrap", "exit 4")  # not one of `jobs`: never seen

        oom_state = "OUT_OF_MEMORY" if slurm.cgroup else "FAILED"
        assert slurm.wait_state(failed, {"FAILED"}) == "FAILED"
        assert slurm.wait_state(oom, {oom_state}) == oom_state
        assert slurm.wait_state(idle, {"CANCELLED"}, 60) == "CANCELLED"  # alertd cancelled it

        def by_rule(rule: str) -> dict[str, dict[str, Any]]:
            return {a["labels"]["run"]: a for a in _alerts(receiver) if a["labels"]["alertname"] == rule}

        wanted = {failed, oom}
        jobs_failed = wait_for(
            lambda: wanted <= by_rule("slurm_job_failed").keys() and by_rule("slurm_job_failed"),
            "the slurm_job_failed alerts",
            30,
            alertd,
        )
        assert jobs_failed[failed]["labels"]["state"] == "FAILED" and jobs_failed[failed]["labels"]["exit_code"] == "3"
        assert jobs_failed[oom]["labels"]["state"] == oom_state
        assert jobs_failed[oom]["annotations"]["summary"] == f"Slurm job {oom} (t-oom) ended {oom_state}"
        assert other not in by_rule("slurm_job_failed")

        crashed = wait_for(
            lambda: {failed, oom, idle} <= by_rule("run_crashed").keys() and by_rule("run_crashed"),
            "run_crashed for the failed, out-of-memory and cancelled jobs",
            30,
            alertd,
        )
        assert crashed[failed]["labels"]["reason"] == "crashed" and crashed[oom]["labels"]["reason"] == "crashed"
        assert crashed[idle]["labels"]["reason"] == "killed"  # CANCELLED: stopped, not crashed

        pending = wait_for(lambda: by_rule("slurm_job_pending").get(held), "the held job's pending alert", 30, alertd)
        assert pending["labels"]["job_name"] == "t-held"

        (summary,) = wait_for(lambda: _actions(receiver), "the slurm report", 30, alertd)
        assert f"job {idle} (label): scancel at" in summary and "the job ended CANCELLED" in summary
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()


USR1_CHILD = Path(__file__).resolve().parents[1] / "exec" / "usr1_child.py"


def test_scancel_usr1_full_reaches_the_trainer_under_alertd_exec_once(slurm: LocalSlurm, tmp_path: Path) -> None:
    """The README's Slurm recipe: `scancel --signal=USR1 --full` signals every process of the job, alertd exec
    too. alertd stays (it used to die of it, and the trainer of SIGPIPE), and the trainer gets it once."""
    (tmp_path / "rules.yaml").write_text("rules: [{name: nf, metric: loss, condition: nonfinite}]\n")
    out = tmp_path / "usr1"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/sh\nexec {sys.executable} -m alertd exec --rules {tmp_path / 'rules.yaml'} "
        f"--state-dir {tmp_path / 'state'} -- {sys.executable} {USR1_CHILD} {out}\n"
    )
    job = slurm.sbatch("-J", "exec-usr1", f"--export=ALL,PYTHONPATH={os.pathsep.join(sys.path)}", str(script))
    deadline = time.monotonic() + 90
    while not Path(f"{out}.pid").exists():
        assert time.monotonic() < deadline, f"the job's trainer never started:\n{slurm.logs()}"
        time.sleep(0.1)
    time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR1", "--full", job], env=slurm.env, check=True)
    assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 90) == "COMPLETED"
    assert out.read_text() == "1"
