"""The slurm notifier over stand-in `squeue`/`scancel` programs: what it attributes, what it refuses, what it runs."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from fake_slurm import FakeSlurm, job

from alertd.actions.config import SlurmNotifierConfig
from alertd.actions.slurm import SlurmNotifier, SlurmReport
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.runs.procfs import Procfs
from alertd.runs.writers import VerifiedWriter

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()
NOT_TAKEN = (
    r"no attributable Slurm job \(it needs a slurm_job_id label or a verified writer with SLURM_JOB_ID\); its "
    r"slurm_job_id label is not taken: the alert comes from source 'tb', not from a slurm source of this config "
    r"\(jobs\)$"
)


def firing(
    labels: dict[str, str], *, active_at: float = 1000.0, state: TransitionKind = TransitionKind.FIRING
) -> Transition:
    return Transition(
        "loss_not_finite", state, time.time(), 5, float("nan"), make_labels(labels), "critical", (), active_at
    )


def note(*alerts: Transition) -> Notification:
    return Notification("cancel", "g", (), "firing", alerts, "k", time.time())


def notifier(fake: FakeSlurm, writers: Any = None, trust: tuple[str, ...] = ("jobs",), **kw: Any) -> SlurmNotifier:
    """A notifier over the stand-in programs; `trust`: the config's slurm sources (their labels count)."""
    cfg = SlurmNotifierConfig.model_validate({"type": "slurm", "squeue": fake.squeue, "scancel": fake.scancel, **kw})
    return SlurmNotifier("cancel", cfg, writers=writers, slurm_sources=trust)


async def settle(n: SlurmNotifier, count: int = 1, timeout: float = 20.0) -> list[SlurmReport]:
    deadline = time.monotonic() + timeout
    while len(n.history) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return n.history


@pytest.fixture
def trainer() -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose environment names Slurm job 42, as a job step's processes' do."""
    env = {**os.environ, "SLURM_JOB_ID": "42"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def writer_of(proc: subprocess.Popen[bytes], logdir: Path, *, host: str = HOST, alive: bool = True) -> Any:
    """A writers lookup answering `proc` as the verified writer of run exp1 (source tb), whose event file
    (ours, empty) is created in `logdir`."""
    info = Procfs().read(proc.pid)
    assert info is not None
    path = logdir / f"events.out.tfevents.{int(time.time())}.{host}.{proc.pid}.0"
    path.write_bytes(b"")
    w = VerifiedWriter("tb", "exp1", str(path), host, proc.pid, info.start_ticks, os.getuid(), 0.0, True, alive)
    return lambda source, run: w if (source, run) == ("tb", "exp1") else None


async def test_a_labelled_job_is_cancelled_once_per_firing(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING"), job(43, "RUNNING")])
    n = notifier(fake)
    alert = firing({"slurm_job_id": "42", "source": "jobs", "run": "42"})
    await n.send(note(alert))
    await n.send(note(alert))  # a repeat of the same firing: nothing more
    (report,) = await settle(n)
    assert fake.calls("scancel") == [["42"]]
    assert (report.job, report.attributed, report.ended, report.state) == ("42", "label", True, "CANCELLED")
    assert [s.name for s in report.signals] == ["scancel"]
    assert "job 42 (label): scancel at" in report.summary() and "the job ended CANCELLED" in report.summary()
    await n.send(note(firing({"source": "jobs", "slurm_job_id": "42"}, state=TransitionKind.RESOLVED)))
    assert fake.calls("scancel") == [["42"]]  # resolutions never act


async def test_with_a_signal_the_job_gets_grace_then_is_cancelled(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    n = notifier(fake, signal="USR1", grace="1s")
    await n.send(note(firing({"source": "jobs", "slurm_job_id": "42"})))
    assert fake.calls("scancel") == [["--signal=USR1", "--full", "42"]]  # at once; the rest in the background
    (report,) = await settle(n, timeout=60)
    assert fake.calls("scancel") == [["--signal=USR1", "--full", "42"], ["42"]]
    assert [s.name for s in report.signals] == ["SIGUSR1", "scancel"]
    assert report.ended is True and report.state == "CANCELLED"
    assert "SIGUSR1 at" in report.summary() and "then scancel at" in report.summary()


async def test_the_job_comes_from_the_verified_writers_environment(
    tmp_path: Path, trainer: subprocess.Popen[bytes]
) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    n = notifier(fake, writers=writer_of(trainer, tmp_path), signal="SIGTERM", grace="0s", cancel=False)
    await n.send(note(firing({"source": "tb", "run": "exp1"})))
    (report,) = await settle(n)
    assert fake.calls("scancel") == [["--signal=TERM", "--full", "42"]]
    assert report.attributed == f"writer pid {trainer.pid}" and report.refused is None


@pytest.mark.parametrize(
    ("labels", "kw", "why"),
    [
        ({"source": "tb", "run": "exp9"}, {}, "no attributable Slurm job"),
        ({"source": "jobs", "slurm_job_id": "42; rm -rf /"}, {}, "is not a job id"),
        ({"slurm_job_id": "42", "host": "elsewhere"}, {}, "comes from host 'elsewhere'"),
        ({"slurm_job_id": "42"}, {"job_from": ["writer"]}, "no attributable Slurm job"),
        ({"source": "jobs", "slurm_job_id": "7"}, {}, "Slurm knows no job 7"),
        ({"source": "jobs", "slurm_job_id": "5"}, {}, r"already ended \(COMPLETED\)"),
        ({"source": "tb", "run": "exp9", "slurm_job_id": "42"}, {}, NOT_TAKEN),
        ({"run": "exp9", "slurm_job_id": "42"}, {}, "not taken: the alert comes from no source"),
        (
            {"source": "tb", "run": "exp1", "slurm_job_id": "5"},
            {"trust": ("tb",)},
            "ambiguous: label says 5, writer pid",
        ),
    ],
)
async def test_what_it_cannot_attribute_exactly_is_refused(
    tmp_path: Path, trainer: subprocess.Popen[bytes], labels: dict[str, str], kw: dict[str, Any], why: str
) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING"), job(5, "COMPLETED")])
    n = notifier(fake, writers=writer_of(trainer, tmp_path), **kw)
    await n.send(note(firing(labels)))
    (report,) = n.history
    assert report.refused is not None and re.search(why, report.refused), report.refused
    assert fake.calls("scancel") == []
    assert "REFUSED" in report.summary()


async def test_a_writer_outside_slurm_or_gone_is_refused(tmp_path: Path, trainer: subprocess.Popen[bytes]) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"PATH": os.environ["PATH"]})
    try:
        n = notifier(fake, writers=writer_of(plain, tmp_path))
        await n.send(note(firing({"source": "tb", "run": "exp1"})))
        assert "does not run in a Slurm job (no SLURM_JOB_ID)" in str(n.history[-1].refused)
        n = notifier(fake, writers=writer_of(trainer, tmp_path, alive=False))
        await n.send(note(firing({"source": "tb", "run": "exp1"})))
        assert "has exited" in str(n.history[-1].refused)
        n = notifier(fake, writers=writer_of(trainer, tmp_path, host="gpu-7"))
        await n.send(note(firing({"source": "tb", "run": "exp1"})))
        assert "runs on host 'gpu-7'" in str(n.history[-1].refused)
        # The pid now names another process (a different start time): its environment is not read.
        info = Procfs().read(trainer.pid)
        assert info is not None
        w = VerifiedWriter("tb", "exp1", "/e", HOST, trainer.pid, info.start_ticks + 1, os.getuid(), 0.0, True, True)
        n = notifier(fake, writers=lambda s, r: w)
        await n.send(note(firing({"source": "tb", "run": "exp1"})))
        assert "can't be read" in str(n.history[-1].refused)
    finally:
        plain.kill()
        plain.wait()
    assert fake.calls("scancel") == []


async def test_a_slurm_job_id_label_counts_only_from_a_slurm_source(
    tmp_path: Path, trainer: subprocess.Popen[bytes]
) -> None:
    """A `slurm_job_id` label on an alert of another source (a samples line can carry any label) is not
    taken: refused where nothing else names the job; where the run has a verified writer, its own
    SLURM_JOB_ID is the job, whatever the label says."""
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING"), job(43, "RUNNING")])
    n = notifier(fake, trust=("jobs",))
    await n.send(note(firing({"source": "samples", "run": "r1", "slurm_job_id": "43"})))
    (report,) = n.history
    assert report.refused is not None and report.refused.endswith(
        "its slurm_job_id label is not taken: the alert comes from source 'samples', not from a slurm source of "
        "this config (jobs)"
    )
    assert "REFUSED job (none)" in report.summary()
    n = notifier(fake, writers=writer_of(trainer, tmp_path), trust=("jobs",), signal="TERM", grace="0s", cancel=False)
    await n.send(note(firing({"source": "tb", "run": "exp1", "slurm_job_id": "43"})))
    (report,) = await settle(n)
    assert (report.job, report.attributed, report.refused) == ("42", f"writer pid {trainer.pid}", None)
    assert fake.calls("scancel") == [["--signal=TERM", "--full", "42"]]  # never job 43


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give an event file to another uid (CI runs as root)")
async def test_no_job_is_cancelled_for_another_users_file_in_the_run(
    tmp_path: Path, trainer: subprocess.Popen[bytes]
) -> None:
    """The run's directory holds an event file of another uid (a shared run directory): the alert's data may
    be that user's, so the writer's job is not cancelled; the refusal names the file and its uid."""
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writers = writer_of(trainer, run_dir)
    theirs = run_dir / f"events.out.tfevents.{int(time.time())}.{HOST}.{trainer.pid}.1"
    theirs.write_bytes(b"")
    os.chown(theirs, 65534, 65534)
    n = notifier(fake, writers=writers)
    await n.send(note(firing({"source": "tb", "run": "exp1", "host": HOST, "pid": str(trainer.pid)})))
    (report,) = n.history
    assert report.refused == (
        f"event file {theirs} of the run belongs to uid 65534, not to uid 0: the alert's data may come from it, "
        f"and it is not the verified writer's (pid {trainer.pid}, uid 0): not acting on the job of the verified "
        f"writer of run 'exp1' (pid {trainer.pid})"
    )
    assert fake.calls("scancel") == [] and trainer.poll() is None


async def test_an_unreachable_controller_is_retried_and_acts_on_the_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    fake.scancel_says(
        "scancel: error: Kill job error on job id 42: Unable to contact slurm controller (connect failure)"
    )
    n = notifier(fake)
    alert = firing({"source": "jobs", "slurm_job_id": "42"})
    with pytest.raises(NotifyError, match="Unable to contact slurm controller") as e:
        await n.send(note(alert))
    assert e.value.recoverable and n.history == []
    fake.scancel_says("")
    await n.send(note(alert))  # the delivery pipeline's retry
    assert fake.calls("scancel") == [["42"], ["42"]]
    # scancel that says the job is unknown (Slurm 22.05 exits 0 then): refused, not retried
    fake.scancel_says("scancel: error: Kill job error on job id 43: Invalid job id specified")
    fake.set_jobs([job(43, "RUNNING")])
    with caplog.at_level(logging.ERROR, logger="alertd.actions.slurm"):
        await n.send(note(firing({"source": "jobs", "slurm_job_id": "43"}, active_at=2000.0)))
    assert any("REFUSED job 43: Slurm knows no job 43" in r.getMessage() for r in caplog.records)


async def test_a_failing_squeue_is_retryable_and_dry_run_runs_nothing(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.mode("fail")
    n = notifier(fake)
    with pytest.raises(NotifyError, match="squeue exited with status 1") as e:
        await n.send(note(firing({"source": "jobs", "slurm_job_id": "42"})))
    assert e.value.recoverable
    fake.mode("")
    fake.set_jobs([job(42, "RUNNING")])
    dry = notifier(fake, dry_run=True, signal="USR1")
    await dry.send(note(firing({"source": "jobs", "slurm_job_id": "42"})))
    assert fake.calls("scancel") == []
    assert "DRY RUN job 42 (label): would send SIGUSR1 to the RUNNING job" in dry.history[0].summary()


async def test_closing_stops_the_wait_and_no_scancel_follows(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs([job(42, "RUNNING")])
    n = notifier(fake, signal="USR1", grace="60s")
    await n.send(note(firing({"source": "jobs", "slurm_job_id": "42"})))
    await asyncio.sleep(0.3)
    await n.aclose()
    (report,) = n.history
    assert "stopped at shutdown" in report.summary()
    assert fake.calls("scancel") == [["--signal=USR1", "--full", "42"]]
    with pytest.raises(NotifyError, match="closed"):
        await n.send(note(firing({"source": "jobs", "slurm_job_id": "42"}, active_at=5.0)))


def test_config_errors() -> None:
    with pytest.raises(pydantic.ValidationError, match="unknown signal 'USR9'"):
        SlurmNotifierConfig.model_validate({"type": "slurm", "signal": "USR9"})
    with pytest.raises(pydantic.ValidationError, match="give a `signal`"):
        SlurmNotifierConfig.model_validate({"type": "slurm", "cancel": False})
    with pytest.raises(pydantic.ValidationError, match="job_from"):
        SlurmNotifierConfig.model_validate({"type": "slurm", "job_from": ["pid"]})
    assert SlurmNotifierConfig.model_validate({"type": "slurm", "signal": "usr1"}).signal == "SIGUSR1"
