"""Reading `squeue --json`: both shapes Slurm writes, exit statuses, and what is not a job list."""

from __future__ import annotations

import json

import pytest
from fake_slurm import job

from alertd.runs.slurmjobs import JobsError, parse_jobs


def doc(*jobs: dict[str, object]) -> str:
    return json.dumps({"meta": {}, "errors": [], "jobs": list(jobs)})


def test_slurm_22_05_records_as_squeue_prints_them() -> None:
    # Fields as the local Slurm 22.05.8 printed them: an out-of-memory kill is status 253 (sacct: 0:125),
    # `exit 3` is 768, a job killed by SIGUSR1 is 10; time_limit is minutes, null when unlimited.
    oom, failed, usr1, running = parse_jobs(
        doc(
            job(1, "OUT_OF_MEMORY", exit_code=253),
            job(2, "FAILED", exit_code=768, time_limit=525600),
            job(3, "FAILED", exit_code=10),
            job(4, "RUNNING", time_limit=90),
        )
    )
    assert (oom.state, oom.exit_code, oom.signal, oom.exit_status) == ("OUT_OF_MEMORY", 0, 125, -125)
    assert (failed.exit_code, failed.signal, failed.exit_status, failed.ended) == (3, None, 3, True)
    assert failed.time_limit == 525600 * 60.0
    assert (usr1.signal, usr1.exit_status) == (10, -10)
    assert (running.ended, running.time_limit, running.end_time, running.start_time) == (False, 5400.0, None, 1100.0)
    assert (oom.job_id, oom.name, oom.user, oom.partition, oom.cluster) == ("1", "job1", "alice", "gpu", "c1")
    assert oom.time_limit is None


def test_slurm_23_shape_flags_and_number_objects() -> None:
    def num(n: int, *, is_set: bool = True, infinite: bool = False) -> dict[str, object]:
        return {"set": is_set, "infinite": infinite, "number": n}

    record = job(
        7,
        "x",
        job_state=["TIMEOUT", "REQUEUED"],
        submit_time=num(1000),
        start_time=num(1100),
        end_time=num(1300),
        time_limit=num(0, infinite=True),
        exit_code={"status": ["SIGNALED"], "return_code": num(0), "signal": {"id": num(9), "name": "KILL"}},
        array_job_id=num(5),
        array_task_id=num(2),
    )
    (j,) = parse_jobs(doc(record))
    assert (j.job_id, j.state, j.start_time, j.end_time, j.time_limit) == ("5_2", "TIMEOUT", 1100.0, 1300.0, None)
    assert (j.exit_code, j.signal, j.exit_status) == (0, 9, -9)
    (k,) = parse_jobs(doc(job(8, "x", job_state=["COMPLETING"], exit_code={"return_code": num(2), "signal": {}})))
    assert (k.state, k.ended, k.exit_status) == ("COMPLETING", False, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<html>", "printed no JSON"),
        ('{"jobs": 3}', "no `jobs` list"),
        ('{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}', "Unable to contact"),
        ('{"jobs": ["x"]}', r"jobs\[0\] is not an object"),
        ('{"jobs": [{"name": "a"}]}', r"jobs\[0\] has no job_id"),
    ],
)
def test_what_is_not_a_job_list_says_why(text: str, message: str) -> None:
    with pytest.raises(JobsError, match=message):
        parse_jobs(text)
