"""The slurm notifier: stops the Slurm job behind a firing alert with `scancel`.

For each alert that turns FIRING (once per firing: the alert's fingerprint and `active_at`, as for
`kill`; repeats, re-sends and resolutions do nothing):

1. The job is attributed, exactly (`SlurmNotifierConfig.job_from`), and tied to the alert's run:
   - `label`: the alert's `slurm_job_id` label, `1234` or `1234_7`, trusted only when the alert comes from
     one of this config's `slurm` sources (`slurm_sources`: its `source` label names one; the data of no
     source sets `source`). A `slurm_job_id` on any other alert (a samples line, a rule's label) is not
     taken: anyone who can write a line alertd reads would otherwise cancel any job alertd's user may;
   - `writer`: the `SLURM_JOB_ID` in the environment of the run's verified writer (the process of this
     host, pinned by pid and start time, that alertd verified as the writer of the run's event file: see
     `alertd.runs.writers`), read from /proc only while that pid is still that process, and only when every
     event file of the run that could have produced the alert is the writer's uid's (`foreign_data`, as
     for `kill`).
   Both known and different, neither known, a malformed id, or a `host` label naming another machine:
   refused (reported, never guessed, never retried).
2. The job must be active: `squeue --json` must list it, not ended. Slurm 22.05's `squeue` ignores its
   filters, so the job is looked up in the whole list; `scancel` there exits 0 even for an unknown job,
   so its stderr is read too.
3. With `signal`: `scancel --signal=<SIG> --full <job>` (the batch script and every step get it), then the
   job gets `grace` seconds to end by itself; a job still active then is cancelled with `scancel <job>`
   when `cancel` is true. Without `signal`: `scancel <job>` at once. What follows the first command runs
   in the background: the delivery pipeline never waits through `grace`.

One `SlurmReport` per alert goes to `report` (the app announces it to the alert's other receivers, as
kill's reports) and to `history`, once the job ended or `grace` passed (at once for a refusal).
Errors: a controller that cannot be reached (or `scancel` that fails for another reason) raises
`NotifyError(recoverable=True)`: the firing is not remembered, so the retry acts again. `aclose()` stops the
background waits: no `scancel` is sent after it, and their reports say so.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import ClassVar

from alertd.actions.base import Firings, Refused, Reports
from alertd.actions.config import SlurmNotifierConfig
from alertd.actions.kill import SentSignal
from alertd.actions.targets import ClaimsLookup, SlurmJobTargets, WriterLookup
from alertd.errors import NotifyError
from alertd.model import Notification, format_time
from alertd.runs.procfs import Procfs
from alertd.runs.slurmjobs import Job, JobsError, parse_jobs
from alertd.subproc import run_program

log = logging.getLogger(__name__)

POLL = 1.0
"""Seconds between two looks at the job's state while waiting for it to end."""
SETTLE = 30.0
"""Seconds a cancelled job is watched at most for its final state."""
MAX_SQUEUE = 256 << 20
"""Bytes of `squeue --json` output read at most."""
CLOSE_WAIT = 5.0
_ERR_TAIL = 300


@dataclass(frozen=True, slots=True)
class SlurmReport:
    """What the notifier did (or refused to do) for one alert: `job` is the job id ("" when unknown)."""

    action: ClassVar[str] = "slurm"
    notifier: str
    fingerprint: str
    rule: str
    job: str
    signals: tuple[SentSignal, ...] = ()
    state: str = ""
    """The job's last state seen (`COMPLETED`, `CANCELLED`, ... or still `RUNNING`)."""
    ended: bool = False
    refused: str | None = None
    dry_run: bool = False
    note: str = ""
    attributed: str = ""
    """How the job was attributed: `label`, `writer pid N`, or both."""
    stamp: str = ""
    """The firing's start: tells this firing's report from an earlier one's (the announcement's key)."""

    def summary(self) -> str:
        """One line for people."""
        head = f"slurm {self.notifier} for {self.rule}: "
        note = f"; {self.note}" if self.note else ""
        if self.refused is not None:
            return f"{head}REFUSED job {self.job or '(none)'}: {self.refused}{note}"
        if self.dry_run:
            return f"{head}DRY RUN job {self.job} ({self.attributed}): would {self.note}"
        sent = ", then ".join(
            (f"scancel at {format_time(s.time)}" if s.name == "scancel" else f"{s.name} at {format_time(s.time)}")
            for s in self.signals
        )
        end = f"the job ended {self.state}" if self.ended else f"the job is still {self.state or 'active'}"
        return f"{head}job {self.job} ({self.attributed}): {sent}; {end}{note}"


class SlurmNotifier:
    """Stops the Slurm job of each newly firing alert (see the module docstring for what is trusted).

    `writers` looks up a run's verified writer (None: only the label attributes), `claims` the run's event
    files the writer registry saw; `slurm_sources` names the config's sources of type `slurm` (the only
    ones whose `slurm_job_id` label is trusted; a function is asked at each alert, so a reload that adds or
    drops one counts); `hostname` overrides `socket.gethostname()` and
    `proc_root` the /proc tree (tests).
    """

    def __init__(
        self,
        name: str,
        cfg: SlurmNotifierConfig,
        *,
        report: Callable[[SlurmReport], Awaitable[None]] | None = None,
        writers: WriterLookup | None = None,
        claims: ClaimsLookup | None = None,
        slurm_sources: Iterable[str] | Callable[[], Iterable[str]] = (),
        hostname: str | None = None,
        proc_root: str = "/proc",
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.hostname = hostname or socket.gethostname()
        self.procfs = Procfs(proc_root)
        self._reports: Reports[SlurmReport] = Reports(f"slurm {name}", log, report)
        self.history = self._reports.history
        self._jobs = SlurmJobTargets(
            cfg.job_from, self.procfs, self.hostname, writers=writers, claims=claims, slurm_sources=slurm_sources
        )
        self._acted = Firings()
        self._tasks: dict[asyncio.Task[None], SlurmReport] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"SlurmNotifier(name={self.name!r}, signal={self.cfg.signal!r}, cancel={self.cfg.cancel})"

    async def send(self, notification: Notification) -> None:
        """Act on each alert of `notification` that newly fires; refusals are reported, not raised."""
        if self._closed:
            raise NotifyError(f"slurm notifier {self.name} is closed", recoverable=False)
        for alert in self._acted.fresh(notification, log, f"slurm {self.name}"):
            key = alert.firing_id
            base = SlurmReport(self.name, alert.fingerprint, alert.rule, "", stamp=f"{alert.since:.3f}")
            try:
                job, how = await asyncio.to_thread(self._jobs.attribute, alert)
                base = replace(base, job=job, attributed=how)
                found = await self._job(job)
            except Refused as r:
                self._acted.add(key)
                await self._emit(replace(base, refused=str(r)))
                continue
            if found.ended:
                self._acted.add(key)
                await self._emit(replace(base, refused=f"the job already ended ({found.state})", state=found.state))
                continue
            if self.cfg.dry_run:
                self._acted.add(key)
                what = f"send {self.cfg.signal} to" if self.cfg.signal else "cancel"
                await self._emit(replace(base, dry_run=True, state=found.state, note=f"{what} the {found.state} job"))
                continue
            first = await self._scancel(job, self.cfg.signal)  # NotifyError (recoverable): retried, not remembered
            self._acted.add(key)
            if first is not None:
                await self._emit(replace(base, refused=first, state=found.state))
                continue
            sent = (SentSignal(self.cfg.signal or "scancel", time.time()),)
            start = replace(base, signals=sent, state=found.state)
            task = asyncio.get_running_loop().create_task(self._follow(start), name=f"slurm:{self.name}:{job}")
            self._tasks[task] = start
            task.add_done_callback(self._finished)

    async def aclose(self) -> None:
        """Stop the background waits (no further scancel) and wait briefly for their reports."""
        self._closed = True
        running = list(self._tasks)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CLOSE_WAIT)

    async def wait_idle(self) -> None:
        """Wait until every background wait for a job's end has reported (an ending alertd exec)."""
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending)

    # -- attribution ---------------------------------------------------------------------------------

    # -- Slurm ----------------------------------------------------------------------------------------

    async def _job(self, job: str) -> Job:
        """The job as squeue lists it; Refused when it does not; NotifyError when squeue can't say."""
        return await find_job(self.cfg.squeue, job, self.cfg.timeout, f"slurm {self.name}")

    async def _scancel(self, job: str, sig: str | None) -> str | None:
        """Run scancel; None when it was taken, else why the job can't be acted on (a refusal).
        NotifyError when the controller can't be reached."""
        return await scancel_job(self.cfg.scancel, job, sig, self.cfg.timeout, f"slurm {self.name}")

    async def _follow(self, report: SlurmReport) -> None:
        """After the first command: wait for the end (grace), cancel when asked, then report."""
        sent = list(report.signals)
        state, ended, note = report.state, False, ""
        try:
            wait = self.cfg.grace if self.cfg.signal else min(self.cfg.grace, SETTLE) or SETTLE
            state, ended = await self._wait_end(report.job, wait, state)
            if not ended and self.cfg.signal is not None and self.cfg.cancel:
                why = await self._scancel(report.job, None)
                if why is None:
                    sent.append(SentSignal("scancel", time.time()))
                    state, ended = await self._wait_end(report.job, SETTLE, state)
                else:
                    note = why
        except asyncio.CancelledError:
            note = "stopped at shutdown: no scancel sent after it"
            await self._emit(replace(report, signals=tuple(sent), state=state, note=note))
            raise
        except NotifyError as e:
            note = str(e)
        await self._emit(replace(report, signals=tuple(sent), state=state, ended=ended, note=note))

    async def _wait_end(self, job: str, seconds: float, state: str) -> tuple[str, bool]:
        deadline = time.monotonic() + seconds
        while True:
            try:
                found = await self._job(job)
            except Refused:
                return "ENDED", True  # the controller no longer lists it: it ended
            except NotifyError:
                found = None
            if found is not None:
                state = found.state
                if found.ended:
                    return state, True
            if time.monotonic() >= deadline:
                return state, False
            await asyncio.sleep(min(POLL, max(0.0, deadline - time.monotonic())))

    # -- bookkeeping ----------------------------------------------------------------------------------

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _emit(self, report: SlurmReport) -> None:
        await self._reports.emit(report)


# -- the controller's commands, shared with `recover`'s Slurm supervisor (`alertd.service.slurm_recovery`) ------


async def find_job(squeue: str, job: str, timeout: float, who: str) -> Job:
    """The job as `squeue --json` lists it; Refused when it does not; NotifyError (recoverable) when squeue can't
    say, (not recoverable) when it can't be run. `who` starts the errors' messages."""
    try:
        done = await run_program(
            [squeue, "--json", f"--jobs={job.split('_')[0]}"], timeout=timeout, max_stdout=MAX_SQUEUE
        )
    except OSError as e:
        raise NotifyError(f"{who}: cannot run {squeue!r}: {e.strerror}", recoverable=False) from None
    err = done.stderr.decode(errors="replace").strip()[-_ERR_TAIL:]
    if done.timed_out or done.returncode != 0 or done.stdout_cut:
        if "Invalid job id" in err:
            raise Refused(f"Slurm knows no job {job}")
        why = "timed out" if done.timed_out else f"exited with status {done.returncode}: {err}"
        raise NotifyError(f"{who}: squeue {why}", recoverable=True)
    try:
        jobs = await asyncio.to_thread(parse_jobs, done.stdout)
    except JobsError as e:
        raise NotifyError(f"{who}: {e}", recoverable=True) from None
    for j in jobs:
        if j.job_id == job:
            return j
    raise Refused(f"Slurm knows no job {job} (not in squeue's list: unknown, or ended long ago)")


async def scancel_job(scancel: str, job: str, sig: str | None, timeout: float, who: str) -> str | None:
    """Run scancel (with `sig`: `--signal=<sig> --full`); None when it was taken, else why the job can't be acted
    on (a refusal). NotifyError when the controller can't be reached."""
    argv = [scancel]
    if sig is not None:
        argv += [f"--signal={sig.removeprefix('SIG')}", "--full"]
    argv.append(job)
    return await controller_command(argv, job, timeout, who, "scancel")


async def controller_command(argv: list[str], job: str, timeout: float, who: str, what: str) -> str | None:
    """Run a command on `job` (`what`: scancel, `scontrol requeue`); None when the controller took it, else why the job
    can't be acted on (a refusal: Slurm said no). NotifyError when it failed otherwise (recoverable: it may pass,
    a controller that can't be reached; not recoverable: the program can't be run)."""
    try:
        done = await run_program(argv, timeout=timeout, max_stdout=4096)
    except OSError as e:
        raise NotifyError(f"{who}: cannot run {argv[0]!r}: {e.strerror}", recoverable=False) from None
    err = done.stderr.decode(errors="replace").strip()
    if not done.timed_out and done.returncode == 0 and "error" not in err.lower():
        return None
    tail = err[-_ERR_TAIL:]
    if "Invalid job id" in err:
        return f"Slurm knows no job {job}"
    if "already completing or completed" in err or "Job/step already" in err:
        return "the job already ended"
    if (
        "denied" in err.lower()
        or "not permitted" in err.lower()
        or "disabled" in err.lower()
        or "pending execution" in err.lower()
    ):
        return f"{what} was refused: {tail}"
    why = "timed out" if done.timed_out else f"failed (status {done.returncode}): {tail}"
    raise NotifyError(f"{who}: {what} {job} {why}", recoverable=True)
