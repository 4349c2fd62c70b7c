"""`alertd exec -- torchrun ...`: alertd supervises the launcher, knows its ranks, names the rank that failed, and
its stop reaches every rank at one step. Real torchrun (Gloo, CPU, 3 ranks of a linear model), real alertd exec
with the built-in rules; one torchrun per scenario. The rank-naming parser on torchrun's real output, captured once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from alertd.sources.textlog.torchrun import FirstFailure

HERE = Path(__file__).resolve().parent
CHILD = HERE / "torchrun_child.py"
DATA = HERE / "data"
TORCHRUN = Path(sys.executable).with_name("torchrun")
_UNSET = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ALERTD_SAMPLES_FILE", "ALERTD_STOP_FILE", "ALERTD_STATE_DIR")


def _exec_torchrun(cwd: Path, mode: str, steps: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env["OMP_NUM_THREADS"] = "1"
    launcher = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node=3",
        "--tee=3",
        str(CHILD),
        str(cwd / "out"),
        str(steps),
        mode,
    ]
    return subprocess.run(
        [sys.executable, "-m", "alertd", "exec", "--run", "ddp", "--", *launcher],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=cwd,
        env=env,
    )


def _job_said(done: subprocess.CompletedProcess[str]) -> str:
    """For a failure's message: the job's own lines other than its steps (the ranks' tracebacks, torchrun's
    summary) and alertd's warnings, at most the last 80."""
    own = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if not re.search(r"step=\d+ loss=|stopped at step|alertd notify receiver=|\"level\": \"info\"", line)
    ]
    return "\n".join(own[-80:])


def _notifications(stderr: str, rule: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if line.startswith("alertd notify receiver=") and "status=firing" in line and f"{rule} " in line
    ]


def test_the_first_failure_is_read_from_torchrun_s_own_summary() -> None:
    for name in ("torchrun_rank0_failed.txt", "torchrun_tee_rank0_failed.txt"):
        failure = FirstFailure()
        lines = (DATA / name).read_text().splitlines()
        kept = failure.feed(lines[:10])
        assert failure.rank is None and kept == lines[:10], name  # steps and warnings only
        kept = failure.feed(lines[10:])
        assert failure.rank == "0", name
        # the launcher's own log lines and summary are not the trainer's output
        assert not [k for k in kept if "api.py:10" in k or "exitcode" in k or "local_rank" in k], name
        assert any("ChildFailedError:" in k for k in kept) and any("[rank0]: RuntimeError" in k for k in kept)
    # the root cause, not the first of the failures listed (ranks 1 and 2, SIGTERMed by torchrun)
    head = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "t.py FAILED", "-" * 60]
    failure = FirstFailure()
    failure.feed(
        [*head, "Failures:", "[1]:", "  rank      : 1 (local_rank: 1)", "Root Cause (first observed failure):"]
    )
    failure.feed(["[2]:", "  time      : 2026-12-04_21:06:35", "  host      : n1", "  rank      : 2 (local_rank: 0)"])
    assert failure.feed(["=" * 60, "step=3 loss=1.0"]) == ["step=3 loss=1.0"]  # the summary is over
    assert failure.rank == "2"
    # without the summary: the agent's log line gives the local rank
    agent = FirstFailure()
    line = "E1204 21:06:35.778000 18845 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
    assert agent.feed([line + "local_rank: 1 (pid: 18850) of binary: x"]) == []
    assert agent.rank == "1"


def test_a_rank_that_raises_ends_the_job_crashed_naming_it(tmp_path: Path) -> None:
    done = _exec_torchrun(tmp_path, "raise0", 40)
    err = done.stderr
    assert done.returncode == 1, _job_said(done)
    crashed = _notifications(err, "run_crashed")
    assert len(crashed) == 1, "\n".join(crashed) + err[-4000:]
    fired = [line for line in err.splitlines() if "alert run_crashed firing" in line]
    assert len(fired) == 1 and "rank=0" in fired[0] and "reason=crashed" in fired[0], fired
    assert "rank 0 failed first" in err
    ranks = re.findall(r"alertd exec: ranks of run ddp: (.*)", err)
    assert ranks and all(f"{r} (pid " in ranks[-1] for r in "012"), ranks
    assert not _notifications(err, "run_finished")


def test_a_nan_on_one_rank_stops_every_rank_at_one_step_and_no_nan_weights_are_saved(tmp_path: Path) -> None:
    done = _exec_torchrun(tmp_path, "nan1", 400)
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, _job_said(done)
    stops = [int(s) for s in re.findall(r"rank \d stopped at step (\d+)", out)]
    assert len(stops) == 3 and len(set(stops)) == 1 and 8 <= stops[0] < 399, out[-3000:]
    nan = _notifications(err, "loss_not_finite")
    assert nan, err[-4000:]
    ledger = [json.loads(line) for line in (tmp_path / "out" / "alertd-checkpoints.jsonl").read_text().splitlines()]
    assert ledger and all(not e["finite"] and not e["saved"] for e in ledger), ledger
    assert [e["step"] for e in ledger] == [stops[0] + 1], ledger  # one veto, by rank 0, at the agreed step
    assert not list((tmp_path / "out").glob("*.pt"))
