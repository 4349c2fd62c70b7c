"""The `slurm` source: Slurm jobs as series and as runs, from `squeue --json` each interval.

Every sample has labels `source`, `run` (the job id: `1234`, or `1234_7` for an array task),
`slurm_job_id` (the same: what the `slurm` notifier cancels), `job_name`, `user` and `partition`.

metric                 unit     when
slurm.job.pending      seconds  each poll while the job waits: time since it was submitted
slurm.job.elapsed      seconds  each poll while it has started and not ended: time since it started
slurm.job.time_left    seconds  the same polls, for a job with a time limit: time until the limit
slurm.job.end          1        once, at its end time, label `state`: COMPLETED, FAILED, OUT_OF_MEMORY,
                                TIMEOUT, NODE_FAIL, CANCELLED, PREEMPTED, BOOT_FAIL or DEADLINE

and for the run model (`alertd.runs.tracker`): `run.started` at its start time; at its end `run.exit_code` (the
return code, or -N for signal N: Slurm records an out-of-memory kill as signal 125), `run.stopped` for
CANCELLED and PREEMPTED (the run ends `killed`), `run.crashed` (1 for FAILED, OUT_OF_MEMORY, TIMEOUT,
NODE_FAIL, BOOT_FAIL, DEADLINE; else 0) and `run.finished`. So `run_crashed` fires for a failed job and
`run_finished` for a completed one, as for any source.

A job's end is reported once, when a poll first sees it ended (the controller lists an ended job for
`MinJobAge`, 300 s by default: a poll `interval` under that sees every end while alertd runs). The first
poll reports the ends of the jobs the controller still lists. A job that leaves the list without being
seen ended (alertd was down longer than MinJobAge) is forgotten: its run stalls. `sacct` is not read.

`squeue` runs as a child process in its own process group, killed at `timeout`; its output is capped at
`max_output` bytes (a longer one fails the poll: narrow `users`/`partitions`) and parsed off the event
loop. Slurm 22.05's `squeue --json` ignores its filters, so `users`, `partitions` and `jobs` are applied
here.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Sequence

from alertd.errors import SourceError
from alertd.model import Labels, Sample, SeriesKey, make_labels
from alertd.runs.slurmjobs import CRASHED as CRASHED_STATES
from alertd.runs.slurmjobs import STOPPED as STOPPED_STATES
from alertd.runs.slurmjobs import Job, JobsError, parse_jobs
from alertd.runs.tracker import CRASHED, EXIT_CODE, FINISHED, STARTED, STOPPED
from alertd.sources.config import SlurmConfig
from alertd.subproc import run_program

log = logging.getLogger(__name__)

PENDING = "slurm.job.pending"
ELAPSED = "slurm.job.elapsed"
TIME_LEFT = "slurm.job.time_left"
END = "slurm.job.end"
_STDERR_TAIL = 300


class SlurmSource:
    """Polls `squeue --json`; keeps, per job it lists, what it has already reported."""

    def __init__(self, cfg: SlurmConfig) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.interval = cfg.interval
        self._started: set[str] = set()
        """Jobs whose `run.started` was reported."""
        self._ended: set[str] = set()
        """Jobs whose end was reported."""
        self._dropped = 0

    def __repr__(self) -> str:
        return f"SlurmSource(name={self.name!r}, squeue={self.cfg.squeue!r})"

    async def aclose(self) -> None:
        return None

    async def poll(self, now: float) -> Sequence[Sample]:
        jobs = await self.jobs()
        chosen = [j for j in jobs if self._wanted(j)]
        if len(chosen) > self.cfg.max_jobs:
            if len(chosen) - self.cfg.max_jobs != self._dropped:
                log.warning(
                    "slurm source %s: %d jobs, max_jobs is %d: the newest are left out",
                    self.name,
                    len(chosen),
                    self.cfg.max_jobs,
                )
            self._dropped = len(chosen) - self.cfg.max_jobs
            chosen = chosen[: self.cfg.max_jobs]
        out: list[Sample] = []
        for job in chosen:
            self._samples(job, now, out)
        listed = {j.job_id for j in chosen}
        self._started &= listed  # a job the controller forgot is forgotten here too
        self._ended &= listed
        return out

    async def jobs(self) -> list[Job]:
        """Every job `squeue --json` lists now; SourceError when it cannot say."""
        argv = [self.cfg.squeue, "--json"]
        try:
            done = await run_program(argv, timeout=self.cfg.timeout, max_stdout=self.cfg.max_output)
        except OSError as e:
            raise SourceError(f"slurm source {self.name}: cannot run {self.cfg.squeue!r}: {e.strerror or e}") from None
        if done.timed_out:
            raise SourceError(f"slurm source {self.name}: squeue did not finish within {self.cfg.timeout:g}s")
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
            raise SourceError(f"slurm source {self.name}: squeue exited with status {done.returncode}: {err}")
        if done.stdout_cut:
            raise SourceError(
                f"slurm source {self.name}: squeue printed more than max_output ({self.cfg.max_output} bytes): "
                "raise max_output, or choose fewer jobs with users/partitions"
            )
        try:
            return await asyncio.to_thread(parse_jobs, done.stdout)
        except JobsError as e:
            raise SourceError(f"slurm source {self.name}: {e}") from None

    def _wanted(self, job: Job) -> bool:
        cfg = self.cfg
        if cfg.users is not None and job.user not in cfg.users:
            return False
        if cfg.partitions is not None and not set(job.partition.split(",")) & set(cfg.partitions):
            return False
        return cfg.jobs is None or any(fnmatch.fnmatchcase(job.name, p) for p in cfg.jobs)

    def _labels(self, job: Job) -> Labels:
        return make_labels(
            {
                "source": self.name,
                "run": job.job_id,
                "slurm_job_id": job.job_id,
                "job_name": job.name,
                "user": job.user,
                "partition": job.partition,
            }
        )

    def _samples(self, job: Job, now: float, out: list[Sample]) -> None:
        if job.job_id in self._ended:
            return
        labels = self._labels(job)

        def add(metric: str, t: float, value: float, extra: dict[str, str] | None = None) -> None:
            keys = make_labels({**dict(labels), **extra}) if extra else labels
            out.append(Sample(SeriesKey(metric, keys), t, None, value))

        if job.state == "PENDING":
            if job.submit_time is not None:
                add(PENDING, now, max(0.0, now - job.submit_time))
            return
        if job.start_time is not None and job.job_id not in self._started and job.start_time <= now:
            self._started.add(job.job_id)
            add(STARTED, job.start_time, 1.0)
        if not job.ended:
            if job.start_time is not None and job.start_time <= now:
                add(ELAPSED, now, now - job.start_time)
                if job.time_limit is not None:
                    add(TIME_LEFT, now, job.start_time + job.time_limit - now)
            return
        self._ended.add(job.job_id)
        t = job.end_time if job.end_time is not None else now
        status = job.exit_status
        if status is not None:
            add(EXIT_CODE, t, float(status))
        if job.state in STOPPED_STATES:
            add(STOPPED, t, 1.0)
        add(CRASHED, t, 1.0 if job.state in CRASHED_STATES else 0.0)
        add(FINISHED, t, 1.0)
        extra = {"state": job.state} if status is None else {"state": job.state, "exit_code": str(status)}
        add(END, t, 1.0, extra)
