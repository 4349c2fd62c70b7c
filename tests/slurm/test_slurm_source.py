"""The slurm source over a stand-in `squeue` (a real child process): series, ends once, filters, the run model,
and every way `squeue` can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
from fake_slurm import FakeSlurm, job

from alertd.errors import SourceError
from alertd.model import Sample
from alertd.runs.tracker import EndReason, RunTracker
from alertd.sources.config import SlurmConfig
from alertd.sources.slurm import SlurmSource

pytestmark = pytest.mark.anyio
NOW = 2_000.0


def source(fake: FakeSlurm, **kw: Any) -> SlurmSource:
    return SlurmSource(SlurmConfig(name="jobs", type="slurm", squeue=fake.squeue, **kw))


def table(samples: list[Sample]) -> list[tuple[str, str, float, float, dict[str, str]]]:
    out = []
    for s in samples:
        labels = dict(s.series.labels)
        extra = {k: v for k, v in labels.items() if k in ("state", "exit_code")}
        out.append((labels["run"], s.series.metric, s.time, s.value, extra))
    return out


async def test_states_become_series_and_each_end_is_reported_once(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs(
        [
            job(1, "PENDING"),
            job(2, "RUNNING", time_limit=60),
            job(3, "OUT_OF_MEMORY", exit_code=253),
            job(4, "CANCELLED", exit_code=15),
            job(5, "COMPLETED"),
        ]
    )
    src = source(fake)
    first = await src.poll(NOW)
    assert table(list(first)) == [
        ("1", "slurm.job.pending", NOW, 1000.0, {}),
        ("2", "run.started", 1100.0, 1.0, {}),
        ("2", "slurm.job.elapsed", NOW, 900.0, {}),
        ("2", "slurm.job.time_left", NOW, 3600.0 - 900.0, {}),
        ("3", "run.started", 1100.0, 1.0, {}),
        ("3", "run.exit_code", 1200.0, -125.0, {}),
        ("3", "run.crashed", 1200.0, 1.0, {}),
        ("3", "run.finished", 1200.0, 1.0, {}),
        ("3", "slurm.job.end", 1200.0, 1.0, {"state": "OUT_OF_MEMORY", "exit_code": "-125"}),
        ("4", "run.started", 1100.0, 1.0, {}),
        ("4", "run.exit_code", 1200.0, -15.0, {}),
        ("4", "run.stopped", 1200.0, 1.0, {}),
        ("4", "run.crashed", 1200.0, 0.0, {}),
        ("4", "run.finished", 1200.0, 1.0, {}),
        ("4", "slurm.job.end", 1200.0, 1.0, {"state": "CANCELLED", "exit_code": "-15"}),
        ("5", "run.started", 1100.0, 1.0, {}),
        ("5", "run.exit_code", 1200.0, 0.0, {}),
        ("5", "run.crashed", 1200.0, 0.0, {}),
        ("5", "run.finished", 1200.0, 1.0, {}),
        ("5", "slurm.job.end", 1200.0, 1.0, {"state": "COMPLETED", "exit_code": "0"}),
    ]
    labels = dict(first[0].series.labels)
    assert labels == {
        "source": "jobs",
        "run": "1",
        "slurm_job_id": "1",
        "job_name": "job1",
        "user": "alice",
        "partition": "gpu",
    }

    # The run model reads the markers as it reads any source's.
    runs = RunTracker()
    derived = runs.observe(list(first), NOW)
    reasons = {r.run: r.reason for r in runs.all() if r.reason is not None}
    assert reasons == {"3": EndReason.CRASHED, "4": EndReason.KILLED, "5": EndReason.FINISHED}
    assert {dict(s.series.labels)["run"] for s in derived if s.series.metric == "run.end"} == {"3", "4", "5"}

    # Next poll: the pending job started, the running one ended; ended jobs are not reported again.
    fake.set_jobs(
        [
            job(1, "RUNNING", start_time=1_900),
            job(2, "TIMEOUT", end_time=1_950, exit_code=0),
            job(3, "OUT_OF_MEMORY", exit_code=253),
            job(5, "COMPLETED"),
        ]
    )
    second = table(list(await src.poll(NOW + 10)))
    assert second == [
        ("1", "run.started", 1900.0, 1.0, {}),
        ("1", "slurm.job.elapsed", NOW + 10, 110.0, {}),
        ("2", "run.exit_code", 1950.0, 0.0, {}),
        ("2", "run.crashed", 1950.0, 1.0, {}),
        ("2", "run.finished", 1950.0, 1.0, {}),
        ("2", "slurm.job.end", 1950.0, 1.0, {"state": "TIMEOUT", "exit_code": "0"}),
    ]
    assert table(list(await src.poll(NOW + 20)))[-1][1] == "slurm.job.elapsed"  # job 1 only


async def test_users_partitions_and_name_globs_choose_the_jobs_and_max_jobs_caps_them(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)
    fake.set_jobs(
        [
            job(1, "RUNNING", name="train-a"),
            job(2, "RUNNING", name="train-b", user_name="bob"),
            job(3, "RUNNING", name="eval", partition="gpu,cpu"),
            job(4, "RUNNING", name="train-c", partition="cpu"),
        ]
    )

    async def runs(**kw: Any) -> list[str]:
        samples = await source(fake, **kw).poll(NOW)
        return sorted({dict(s.series.labels)["run"] for s in samples})

    assert await runs() == ["1", "2", "3", "4"]
    assert await runs(users=["alice"]) == ["1", "3", "4"]
    assert await runs(partitions=["gpu"]) == ["1", "2", "3"]
    assert await runs(jobs=["train-*"]) == ["1", "2", "4"]
    assert await runs(jobs=["train-*"], users=["alice"], partitions=["gpu"]) == ["1"]
    assert await runs(max_jobs=2) == ["1", "2"]


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fail", "squeue exited with status 1: slurm_load_jobs error: Unable to contact slurm controller"),
        ("sleep", "squeue did not finish within 0.5s"),
        ("garbage", "squeue --json printed no JSON"),
        ("huge", r"printed more than max_output \(1048576 bytes\)"),
    ],
)
async def test_a_failing_squeue_fails_the_poll_with_why(tmp_path: Path, mode: str, message: str) -> None:
    fake = FakeSlurm(tmp_path)
    fake.mode(mode)
    with pytest.raises(SourceError, match=message):
        await source(fake, timeout=0.5, max_output=1 << 20).poll(NOW)


async def test_no_squeue_says_so(tmp_path: Path) -> None:
    src = SlurmSource(SlurmConfig(name="jobs", type="slurm", squeue=str(tmp_path / "nope")))
    with pytest.raises(SourceError, match=r"cannot run .*nope.*No such file"):
        await src.poll(NOW)


def test_bad_keys_are_config_errors() -> None:
    with pytest.raises(pydantic.ValidationError, match="max_output"):
        SlurmConfig(name="j", type="slurm", max_output=10)
    with pytest.raises(pydantic.ValidationError, match=r"[Ee]xtra"):
        SlurmConfig.model_validate({"name": "j", "type": "slurm", "user": "alice"})
