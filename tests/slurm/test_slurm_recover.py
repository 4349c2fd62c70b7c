"""`recover` with `target: slurm` against a real local Slurm (slurm-wlm): a NaN at update 40 of a plain torch loop
running as a Slurm job makes alertd write the recovery plan next to the job's checkpoint ledger and requeue the job
(`scontrol requeue`); the requeued job resumes from the last finite checkpoint, skips the planned updates, trains on
at half the LR and completes. The job is attributed through the verified writer of its TensorBoard event file
(its SLURM_JOB_ID, `job_from: [writer]`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from service_helpers import Alertd, wait_for
from slurm_testkit import LocalSlurm

from alertd.actions.config import RecoverConfig
from alertd.integrations.ledger import read as read_ledger
from alertd.integrations.plan import ACK_NAME, PLAN_NAME
from alertd.testing.receiver import Receiver

HERE = Path(__file__).resolve().parent
CHILD = HERE / "recover_slurm_child.py"

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
  back: {{type: recover, target: slurm, job_from: [writer], checkpoints: "{out}/{{run}}", lr_scale: 0.5}}
route:
  receivers: [hook]
  group_by: [rule, run]
  group_wait: 0s
  routes: [{{match: {{rule: loss_not_finite}}, receivers: [back], continue: true}}, {{receivers: [hook]}}]
rules:
  - {{name: loss_not_finite, metric: train/loss, labels_match: {{source: tb}}, condition: nonfinite}}
"""


def _reports(receiver: Receiver) -> list[str]:
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [
        a["annotations"].get("summary", "")
        for b in bodies
        for a in b["alerts"]
        if a["labels"].get("action") == "recover"
    ]


def _printed_lrs(text: str) -> list[set[float]]:
    attempts: list[set[float]] = []
    for line in text.splitlines():
        if line.startswith("attempt="):
            attempts.append(set())
        elif (m := re.fullmatch(r"step=\d+ loss=\S+ lr=(\S+)", line)) and attempts:
            attempts[-1].add(float(m.group(1)))
    return attempts


def test_a_nan_in_a_slurm_job_requeues_it_once_and_it_resumes_from_the_plan(slurm: LocalSlurm, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    receiver = Receiver()
    tb, out = tmp_path / "runs", tmp_path / "out"
    (tb / "exp1").mkdir(parents=True)
    (out / "exp1").mkdir(parents=True)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=tb, out=out, url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state", env={"SLURM_CONF": str(slurm.conf)})
    try:
        alertd.wait_log("alertd started")
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {CHILD} {out / 'exp1'} {tb / 'exp1'}\n")
        log = tmp_path / "job.out"
        job = slurm.sbatch(
            "-J",
            "recover",
            "--requeue",
            "--open-mode=append",
            f"--output={log}",
            f"--export=ALL,PYTHONPATH={os.pathsep.join(sys.path)}",
            str(script),
        )
        wait_for(lambda: "done at step" in log.read_text() if log.exists() else False, "the job's end", 90, alertd)
        assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 30) == "COMPLETED", log.read_text()

        text = log.read_text()
        lines = text.splitlines()
        # Requeued exactly once; the second run resumed from the plan's checkpoint, at half the LR, to the end.
        assert [x for x in lines if x.startswith("attempt=")] == [
            "attempt=0 resume_from=None",
            f"attempt=1 resume_from={out / 'exp1' / 'alertd-step=30.pt'}",
        ], text[-1000:] + alertd.logs()[-6000:]
        show = subprocess.run(["scontrol", "show", "job", job], env=slurm.env, capture_output=True, text=True).stdout
        assert "Restarts=1" in show, show
        assert [x for x in lines if x.startswith("done at")] == ["done at step 60 finite=True"], text[-3000:]
        assert _printed_lrs(text)[1] == {0.0005} and 0.001 in _printed_lrs(text)[0]
        second = text[text.index("attempt=1") :]
        trained = [int(m.group(1)) for m in re.finditer(r"^step=(\d+) ", second, re.M)]
        assert trained == list(range(41, 61))  # updates 31-40 skipped, as planned

        # The planned updates were skipped by the plan; no save of the killed attempt (SIGTERM saves nothing).
        rows = [json.loads(x) for x in (out / "exp1" / "alertd-samples.jsonl").read_text().splitlines() if x.strip()]
        skipped = [(r["step"], r["labels"]["reason"]) for r in rows if r["metric"] == "train/step_skipped"]
        assert skipped == [(s, "plan") for s in range(30, 40)]
        entries = read_ledger(str(out / "exp1"))
        assert all(e.get("finite") for e in entries if e.get("saved")), entries
        assert not [e for e in entries if e.get("by") == "stop"], entries
        plan = json.loads((out / "exp1" / PLAN_NAME).read_text())
        assert plan["attempt"] == 2 and plan["skip"] == [31, 40] and plan["lr_factor"] == 0.5
        ack = json.loads((out / "exp1" / ACK_NAME).read_text())
        assert ack["attempt"] == 2 and ack["applied"] is True and ack["resumed_step"] == 30

        def both() -> list[str] | None:
            got = _reports(receiver)
            return got if any("resumed from" in r for r in got) else None

        got = wait_for(both, "the planned and resumed reports at the webhook", 30, alertd)
        planned = [r for r in got if "stopping the run to restart it" in r]
        assert len(planned) == 1 and f"Slurm job {job} (writer pid" in planned[0], got
        assert "attempt 2: back to" in planned[0] and "updates 31-40 skipped, LR x0.5" in planned[0]
        (resumed,) = [r for r in got if "resumed from" in r]
        assert "attempt 2 resumed from" in resumed and "at step 30, LR 0.001 -> 0.0005" in resumed
        assert not [r for r in got if "REFUSED" in r or "GAVE UP" in r], got
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()


def _cfg(**kw: object) -> RecoverConfig:
    return RecoverConfig.model_validate({"type": "recover", **kw})


def test_recover_config_target_slurm_keys() -> None:
    cfg = _cfg(target="slurm", checkpoints="/runs/{run}/out", job_from=["label"], scontrol="/opt/bin/scontrol")
    assert cfg.job_from == ["label"] and cfg.scontrol == "/opt/bin/scontrol" and cfg.squeue == "squeue"
    assert cfg.scancel == "scancel" and cfg.timeout == 30.0
    assert cfg.checkpoints_config().template_parts() == [(False, "/runs/"), (True, "run"), (False, "/out")]
    assert _cfg(target="slurm", checkpoints="{run}/out", base_dir="/runs").base_dir == "/runs"
    assert _cfg().target == "child" and _cfg(checkpoints="relative/dir").checkpoints == "relative/dir"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"target": "slurm"}, "target: slurm needs `checkpoints`"),
        ({"target": "slurm", "checkpoints": "out/{run}"}, "checkpoints: path must be absolute"),
        ({"target": "slurm", "checkpoints": "/out/{run"}, "checkpoints: path template"),
        ({"target": "slurm", "checkpoints": "/o", "job_from": ["pid"]}, "job_from"),
        ({"target": "slurm", "checkpoints": "/o", "job_from": []}, "job_from"),
        ({"target": "slurm", "checkpoints": "/o", "timeout": "0s"}, "timeout"),
        ({"target": "slurm", "checkpoints": "/o", "scontrol": ""}, "scontrol"),
        ({"target": "slurm", "checkpoints": "/o", "wait": "5s"}, "`wait` is only used with target: child"),
        ({"target": "slurm", "checkpoints": "/o", "grace": "5s"}, "`grace` is only used with target: child"),
        ({"job_from": ["writer"]}, "`job_from` is only used with target: slurm"),
        ({"scontrol": "scontrol"}, "`scontrol` is only used with target: slurm"),
        ({"base_dir": "/runs"}, "`base_dir` is only used with target: slurm"),
        ({"target": "pid"}, "target"),
    ],
)
def test_recover_config_refuses(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _cfg(**keys)


def test_alertd_exec_refuses_a_recover_with_target_slurm(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        'notifiers: {back: {type: recover, target: slurm, checkpoints: "/tmp/{run}"}}\n'
        "rules: [{name: nf, metric: loss, condition: nonfinite}]\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "state", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "recover with target: slurm" in done.stderr and "use target: child" in done.stderr
