"""`recover` with `target: slurm`: the service's supervisor that rolls a Slurm job back and goes on, by requeueing it.

`SlurmRecovery` is the `Supervisor` of the `recover` notifiers with `target: slurm` (`alertd.actions.recover`), made
by the service on first use. On an incident it:

1. attributes the alert's Slurm job exactly, as the `slurm` notifier does (`SlurmJobTargets`, `job_from`: the
   `slurm_job_id` label of an alert from a `slurm` source, and/or the `SLURM_JOB_ID` of the run's verified writer),
   and checks that the job is active (`squeue --json`); one recovery of a job at a time: until the requeued job's
   trainer acknowledged its plan, further alerts of that job are ignored (logged at info), as is data from before
   the attempt running;
2. reads the checkpoint ledger in `checkpoints:` (a path template, expanded with the alert's labels as the
   `stop_file` notifier's `path`) and plans (`alertd.runs.recovery.decide`), with the job's history: the record
   `slurm:<job id>` in the state directory (its incidents, its plans, the plan pending), which outlives alertd's
   restarts and the job's requeues (the job keeps its id);
3. writes the plan next to the ledger (`alertd.integrations.plan.PLAN_NAME`: the requeued job's callbacks, without
   alertd's environment, apply that file once, when `ACK_NAME` does not name its attempt), commits the record in
   the same transaction as the alert states, reports the plan, and requeues the job (`scontrol requeue <job>`):
   Slurm kills the job's processes (SIGTERM, then SIGKILL after its KillWait), so the trainer saves nothing (no
   poisoned save: alertd's callbacks save on SIGINT/SIGUSR1 and the stop file, not on SIGTERM);
4. once the job is pending again, lets it start `backoff` (at least `MIN_START_DELAY`) from then (`scontrol
   update JobId=<job> StartTime=now+N`: Slurm holds a requeued batch job for about two minutes otherwise), waits
   for the trainer's acknowledgement of the plan's attempt and reports it (`phase="resumed"`: the step it resumed
   at, its LR before and after).

When `decide` gives up (attempts spent) the job is cancelled (`scancel <job>`) and the give-up reported. A refusal
of Slurm's (the job is not requeueable, it ended meanwhile) takes the plan back (the record as before, the plan
file removed) and is reported; a failure that may pass (the controller out of reach) does the same and raises
`NotifyError(recoverable=True)`: the firing is handed over again. Not under alertd exec (its child is recovered by
`target: child`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from alertd.actions.base import Refused
from alertd.actions.config import RecoverConfig
from alertd.actions.recover import Emit, RecoverReport, ledger_dir
from alertd.actions.slurm import controller_command, find_job, scancel_job
from alertd.actions.targets import SlurmJobTargets
from alertd.errors import NotifyError
from alertd.integrations import ledger
from alertd.integrations.commands import read_json, write_atomic
from alertd.integrations.plan import ACK_NAME, PLAN_NAME
from alertd.model import Transition, format_value
from alertd.runs.procfs import Procfs
from alertd.runs.recovery import History, Incident, NoPlan, Plan, decide
from alertd.runs.writers import WriterRegistry
from alertd.service.recovery import ACK_WAIT, acknowledged, plan_from

log = logging.getLogger("alertd.service")

RECORD_PREFIX = "slurm:"
"""The records' keys: `slurm:<job id>`."""
POLL = 0.25
"""Seconds between two looks at the requeued job's state, and at its trainer's acknowledgement."""
REQUEUE_SETTLE = 600.0
"""Seconds the requeued job is watched at most until it is pending again (Slurm's KillWait, the epilog)."""
JOB_CHECK_EVERY = 5.0
"""Seconds between two looks at whether the job still exists, while its acknowledgement is waited for."""
CLOSE_WAIT = 5.0
MIN_START_DELAY = 2
"""Seconds at least between the requeued job's pending again and its start: slurmd refuses to launch a job in the
second its last run was killed in (its credential is revoked then: "Job credential revoked"), and the job fails."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A Slurm job's recoveries: `history` (its incidents and plans), `pending` (the attempt of the plan its trainer
    has not acknowledged yet), `ledger` (the ledger directory of the last plan), `gave_up`, `acked_at` (when the
    attempt running acknowledged its plan: data from before it is an earlier attempt's)."""

    job: str
    history: History = field(default_factory=History)
    pending: int | None = None
    ledger: str = ""
    gave_up: bool = False
    acked_at: float | None = None

    @property
    def attempt(self) -> int:
        """The job's attempt running (1 before any recovery; a requeued job's, once requeued)."""
        return self.history.recoveries + 1

    def as_json(self) -> str:
        return json.dumps(
            {
                "job": self.job,
                "attempt": self.attempt,
                "plans": [p.as_json("", p.incident.time) | {"widened": p.widened} for p in self.history.plans],
                "pending": self.pending,
                "ledger": self.ledger,
                "gave_up": self.gave_up,
                "acked_at": self.acked_at,
            }
        )

    @classmethod
    def from_json(cls, job: str, raw: str | None) -> JobRecord:
        """The record committed (a fresh one where there is none; an unreadable one is logged and dropped)."""
        if raw is None:
            return cls(job)
        try:
            data = json.loads(raw)
            plans = tuple(plan_from(p) for p in data.get("plans", ()))
            pending = data.get("pending")
            acked = data.get("acked_at")
            return cls(
                job,
                History(tuple(p.incident for p in plans), plans),
                int(pending) if pending is not None else None,
                str(data.get("ledger", "")),
                bool(data.get("gave_up", False)),
                float(acked) if acked is not None else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("recover: Slurm job %s: the saved recovery record is unreadable (%s): starting afresh", job, exc)
            return cls(job)


class SlurmRecovery:
    """The service's recoveries of Slurm jobs (see the module's documentation). From the service: `read` and
    `commit` its state directory's records (committed with the alert states), `registry` its verified writers,
    `slurm_sources()` the names of its configuration's `slurm` sources, `exec_mode` whether it is alertd exec."""

    def __init__(
        self,
        *,
        read: Callable[[str], str | None],
        commit: Callable[[str, str | None], None],
        registry: WriterRegistry,
        slurm_sources: Callable[[], frozenset[str]],
        exec_mode: bool = False,
        hostname: str | None = None,
        proc_root: str = "/proc",
    ) -> None:
        self._read, self._commit = read, commit
        self.registry = registry
        self._slurm_sources = slurm_sources
        self.exec_mode = exec_mode
        self.hostname = hostname or socket.gethostname()
        self.procfs = Procfs(proc_root)
        self._busy: set[str] = set()
        """The jobs a recovery is being decided for right now (between two awaits)."""
        self._tasks: set[asyncio.Task[None]] = set()

    # the record

    def record(self, job: str) -> JobRecord:
        """The job's record, as committed."""
        return JobRecord.from_json(job, self._read(RECORD_PREFIX + job))

    def _save(self, record: JobRecord | None, job: str) -> None:
        self._commit(RECORD_PREFIX + job, record.as_json() if record is not None else None)

    # the supervisor

    async def recover(self, cfg: RecoverConfig, alert: Transition, report: RecoverReport, emit: Emit) -> None:
        """Plan a recovery of the alert's Slurm job and requeue it (see the module's documentation)."""
        if self.exec_mode:
            why = "target: slurm is not for alertd exec (its trainer is the child: use target: child)"
            await emit(replace(report, refused=why))
            return
        targets = SlurmJobTargets(
            cfg.job_from,
            self.procfs,
            self.hostname,
            writers=self.registry.writer,
            claims=self.registry.claims,
            slurm_sources=self._slurm_sources,
        )
        try:
            job, how = await asyncio.to_thread(targets.attribute, alert)
        except Refused as r:
            await emit(replace(report, refused=str(r)))
            return
        if job in self._busy:
            log.info("recover: %s for Slurm job %s: a recovery of the job is being decided already", alert.rule, job)
            return
        self._busy.add(job)
        try:
            await self._recover(cfg, alert, report, emit, job, how)
        finally:
            self._busy.discard(job)

    async def aclose(self) -> None:
        """Stop following the requeued jobs (no StartTime update, no resumed report after it)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSE_WAIT)

    async def _recover(
        self, cfg: RecoverConfig, alert: Transition, report: RecoverReport, emit: Emit, job: str, how: str
    ) -> None:
        who = f"recover {report.notifier}"
        record = self.record(job)  # the state database: on the event loop's thread
        if record.gave_up:
            log.info("recover: %s for Slurm job %s: gave up on the job already, nothing to do", alert.rule, job)
            return
        if record.pending is not None:
            body = await asyncio.to_thread(_ack, record.ledger)
            if body is None or body.get("attempt") != record.pending:
                log.info(
                    "recover: %s for Slurm job %s: attempt %d's recovery is under way (its trainer has not "
                    "acknowledged the plan yet): one recovery an attempt",
                    alert.rule,
                    job,
                    record.pending,
                )
                return
            record = replace(record, pending=None, acked_at=_ack_time(body))
            self._save(record, job)
        if record.acked_at is not None and alert.time < record.acked_at:
            log.info(
                "recover: %s for Slurm job %s: its data is from before attempt %d started: not acted on",
                alert.rule,
                job,
                record.attempt,
            )
            return
        try:
            found = await find_job(cfg.squeue, job, cfg.timeout, who)  # NotifyError: handed over again
        except Refused as r:
            await emit(replace(report, refused=str(r)))
            return
        if found.ended:
            await emit(replace(report, refused=f"Slurm job {job} already ended ({found.state})"))
            return
        try:
            directory = ledger_dir(report.notifier, cfg, dict(alert.labels)) or ""
        except NotifyError as exc:
            await emit(replace(report, refused=f"checkpoints: {str(exc).split(': ', 1)[-1]}"))
            return
        entries = await asyncio.to_thread(ledger.read, directory)
        incident = Incident(alert.rule, alert.step, alert.time, record.attempt, str(format_value(alert.value)))
        outcome = decide(cfg.policy(), record.history, incident, entries, os.path.exists, ())
        if isinstance(outcome, NoPlan):
            if not outcome.give_up:
                await emit(replace(report, refused=f"{outcome.why} (in {directory})"))
                return
            await self._give_up(cfg, report, emit, record, outcome, who)
            return
        plan_path = os.path.join(directory, PLAN_NAME)
        run = dict(alert.labels).get("run") or f"slurm job {job}"
        try:
            await asyncio.to_thread(write_atomic, plan_path, outcome.as_json(run, time.time()))
        except OSError as exc:
            await emit(replace(report, refused=f"can't write the plan in {directory}: {exc.strerror or exc}"))
            return
        planned = replace(
            report,
            attempt=outcome.attempt,
            plan=f"Slurm job {job} ({how}) requeued, {outcome.describe()}",
            checkpoint=outcome.checkpoint,
        )
        history = record.history.with_plan(outcome)
        self._save(replace(record, history=history, pending=outcome.attempt, ledger=directory), job)
        await emit(planned)
        argv = [cfg.scontrol, "requeue", job]
        requeued_at = time.time()
        try:
            refused = await controller_command(argv, job, cfg.timeout, who, "scontrol requeue")
        except NotifyError as exc:
            await self._take_back(record, plan_path)
            withdrawn = replace(planned, stamp=f"{report.stamp}-withdrawn-{outcome.attempt}")
            await emit(replace(withdrawn, refused=f"the plan is taken back: {exc} (the alert is handed over again)"))
            raise
        if refused is not None:
            await self._take_back(record, plan_path)
            withdrawn = replace(planned, stamp=f"{report.stamp}-withdrawn-{outcome.attempt}")
            await emit(
                replace(withdrawn, refused=f"Slurm job {job} was not requeued, the plan is taken back: {refused}")
            )
            return
        log.warning("recover: Slurm job %s requeued for attempt %d", job, outcome.attempt)
        follow = self._follow(cfg, job, outcome, directory, planned, emit, requeued_at)
        task = asyncio.create_task(follow, name=f"recover-slurm-{job}-{outcome.attempt}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _take_back(self, record: JobRecord, plan_path: str) -> None:
        """The job was not requeued: the record as it was, and no plan file a later start of the job would apply."""
        self._save(record, record.job)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, plan_path)

    async def _give_up(
        self, cfg: RecoverConfig, report: RecoverReport, emit: Emit, record: JobRecord, outcome: NoPlan, who: str
    ) -> None:
        """No recovery: cancel the job for good (NotifyError, recoverable: handed over again)."""
        refused = await scancel_job(cfg.scancel, record.job, None, cfg.timeout, who)
        self._save(replace(record, gave_up=True), record.job)
        note = f"; scancel {record.job}: {refused}" if refused is not None else f"; Slurm job {record.job} cancelled"
        await emit(replace(report, phase="gave_up", refused=outcome.why + note, attempt=record.attempt))

    async def _follow(
        self,
        cfg: RecoverConfig,
        job: str,
        plan: Plan,
        directory: str,
        planned: RecoverReport,
        emit: Emit,
        requeued_at: float,
    ) -> None:
        """After the requeue: let the job start `backoff` from now once it is pending; wait for the new attempt's
        acknowledgement of the plan, and report it."""
        who = f"recover {planned.notifier}"
        try:
            if not await self._release(cfg, job, requeued_at, who):
                return
            body = await self._await_ack(cfg, job, plan, directory, who)
        except NotifyError as exc:  # the controller can't be run at all
            log.error("recover: Slurm job %s: %s", job, exc)
            return
        if body is None:
            return
        record = self.record(job)  # the state database: on the event loop's thread
        if record.pending == plan.attempt:
            self._save(replace(record, pending=None, acked_at=_ack_time(body)), job)
        await emit(acknowledged(planned, plan, body))

    async def _release(self, cfg: RecoverConfig, job: str, requeued_at: float, who: str) -> bool:
        """Once the requeued job is pending: its earliest start `backoff` from now. False: it is gone."""
        deadline = time.monotonic() + max(REQUEUE_SETTLE, cfg.timeout)
        while time.monotonic() < deadline:
            try:
                found = await find_job(cfg.squeue, job, cfg.timeout, who)
            except Refused:
                log.warning("recover: Slurm job %s is gone after its requeue: no new attempt", job)
                return False
            except NotifyError as exc:
                if not exc.recoverable:
                    raise
                found = None
            if found is not None:
                if found.ended:
                    log.warning("recover: Slurm job %s ended %s after its requeue: no new attempt", job, found.state)
                    return False
                if found.state == "RUNNING" and (found.start_time or 0.0) >= math.floor(requeued_at):
                    return True  # started again already
                if found.state == "PENDING":
                    break
            await asyncio.sleep(POLL)
        else:
            log.warning("recover: Slurm job %s was not pending again %.0fs after its requeue", job, REQUEUE_SETTLE)
            return True
        start = f"now+{max(math.ceil(cfg.backoff), MIN_START_DELAY)}"
        argv = [cfg.scontrol, "update", f"JobId={job}", f"StartTime={start}"]
        try:
            refused = await controller_command(argv, job, cfg.timeout, who, "scontrol update")
        except NotifyError as exc:
            if not exc.recoverable:
                raise
            refused = str(exc)
        if refused is not None:
            log.warning("recover: Slurm job %s starts when Slurm lets it (StartTime not set: %s)", job, refused)
        return True

    async def _await_ack(
        self, cfg: RecoverConfig, job: str, plan: Plan, directory: str, who: str
    ) -> dict[str, Any] | None:
        """The trainer's acknowledgement of `plan`'s attempt; None when the job ended without one, or none came."""
        deadline = time.monotonic() + ACK_WAIT
        looked = time.monotonic()
        while time.monotonic() < deadline:
            body = await asyncio.to_thread(_ack, directory)
            if body is not None and body.get("attempt") == plan.attempt:
                return body
            if time.monotonic() - looked >= JOB_CHECK_EVERY:
                looked = time.monotonic()
                try:
                    found = await find_job(cfg.squeue, job, cfg.timeout, who)
                except Refused:
                    log.warning("recover: Slurm job %s is gone before it acknowledged attempt %d", job, plan.attempt)
                    return None
                except NotifyError as exc:
                    if not exc.recoverable:
                        raise
                    found = None  # out of reach for now: looked at again later
                if found is not None and found.ended:
                    log.warning("recover: Slurm job %s ended before it acknowledged attempt %d", job, plan.attempt)
                    return None
            await asyncio.sleep(POLL)
        log.warning("recover: Slurm job %s: no acknowledgement of attempt %d came", job, plan.attempt)
        return None


def _ack(directory: str) -> dict[str, Any] | None:
    """The acknowledgement in the ledger directory `directory`, if there is a readable one."""
    if not directory:
        return None
    path = os.path.join(directory, ACK_NAME)
    body = read_json(path) if os.path.exists(path) else None
    return body if isinstance(body, dict) else None


def _ack_time(body: dict[str, Any]) -> float:
    when = body.get("time")
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    return time.time()
