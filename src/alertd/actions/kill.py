"""The kill notifier: stops a training process, exactly and safely (design section 7).

For each alert that turns FIRING (once per firing: the key is the alert's fingerprint and `active_at`, so
repeats and re-sends do nothing; resolutions never act), the notifier finds the target process
(`KillConfig.target`), checks that it may stop it (`procs.refusal`: never pid 1, itself, its ancestors,
a thread id, a zombie, a kernel thread or another user's process), pins it by pid and start time, and
sends the signals of `KillConfig.signals` in order, `grace` seconds apart, until the process exits. The
identity is checked again before every signal: a pid that now names another process is never signalled.

How each target is found, and what is trusted:
- `writer`: ONLY the verified writer of the alert's (`source`, `run`) labels, from the `writers` lookup
  (`alertd.runs.writers.WriterRegistry.writer`): a process of this host whose uid owns an event file of that
  run and that alertd saw holding it open for writing ("holds"), or that started before the file was
  created ("owner", for torch's writer, which holds nothing between flushes; the report says which). It
  is pinned by the verified pid AND start time; the alert's `pid` label never names the target (where
  present, it must agree with the verified writer, or the alert is refused: the data came from another
  process's file). A `host` label must equal this host's name exactly. Then the data must be the
  writer's own: every event file of the run that could have produced the alert's series (named for its
  host and pid; all of them for an alert without a pid label), the `claims` lookup's and the run
  directory's, must be owned by the writer's uid at that moment (`alertd.runs.writers.foreign_data`), or the
  alert is refused naming the file and its uid: another user's NaN file in a shared run directory
  never stops your trainer. Without a lookup (`writers=None`) every writer target is refused.
- `pid`: the configured pid.
- `pidfile`: a regular file (not a link, FIFO or device) of at most `PIDFILE_MAX` bytes, read in a worker
  thread; owned by root, by alertd's uid or by the uid of the process it names; a process that started
  after the file was written (more than `START_SLACK_TICKS` clock ticks after its mtime) is a reused pid.
- `cmdline`: the regular expression is matched only against processes alertd may signal; another user's
  process (without `allow_other_users`), a zombie, alertd or its ancestors neither count nor match.

`ask_first` (optional): before any signal, the stop file of `KillConfig.ask_first` is created (the same
path rules as the `stop_file` notifier) and the process gets `wait` seconds to exit by itself (alertd's
training callback saves a checkpoint and stops); only then do the signals start. The stop file is
created even when no process can be signalled (refused target): asking is always safe.

Policy choices:
- A refusal (target not found, not allowed, on another host, ambiguous) is not a delivery failure that a
  retry could fix: it is logged at error level and reported, and `send` does not raise. Internal errors
  (a bug, an unreadable /proc) raise `NotifyError(recoverable=False)`.
- Reports and logs name the program of a process (`procfs.program_name`: `python3 train.py`, never an
  argument, never `-c`'s code: arguments carry secrets) only once alertd has signalled it, its whole command
  line only with `report_cmdline: true`; refusals name pids and uids, never another process's program.
- Without `ask_first`, `send` sends the first signal itself, then the escalation runs as a background
  task, so the delivery pipeline never waits through the grace periods. With it, the wait and every signal
  run in the background. One `KillReport` per target is handed to `report` and kept in `history` once it
  ends (at once for refusals and dry runs).
- `aclose()` stops every running escalation: no signal is sent after it is called. Each stopped escalation
  is reported with the note "escalation cancelled at shutdown ..."; `aclose` waits up to `CLOSE_WAIT`
  seconds for those reports.

Remaining windows, honestly: the writer is verified at the registry's last check, not at the instant of
the signal; between that check and the signal only its identity (pid + start time, then a pidfd) is
checked again, not that it still holds the file. The run's files are looked at (`foreign_data`) when
the target is resolved, just before the first signal (with `ask_first`, before the wait). A pid reused
within one clock tick (10 ms) of the original process's start passes the start-time check alone; the
pidfd catches that where pidfds exist.
For `pidfile`, a reused pid whose process started within `START_SLACK_TICKS` after the file's mtime passes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from alertd.actions.base import Firings, Refused, Reports
from alertd.actions.config import KillConfig
from alertd.actions.procs import Delivery, ExitSeen, ProcessHandle, Procfs, ProcInfo
from alertd.actions.stop_file import StopFileNotifier
from alertd.actions.targets import ChildLookup, ClaimsLookup, ProcessTargets, WriterLookup
from alertd.clock import Clock, SystemClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, format_time

log = logging.getLogger(__name__)

POLL = 0.05
"""Seconds between two looks at /proc while waiting for the target to exit."""
CLOSE_WAIT = 5.0
"""Seconds `aclose` waits for the reports of the escalations it stopped."""
CMDLINE_SHOWN = 80
"""Characters of the program (or, with `report_cmdline`, the command line) a report's line shows."""
_WHY = {
    Delivery.GONE: "process gone/reused",
    Delivery.EXITED: "process already exited",
    Delivery.DENIED: "not permitted (EPERM)",
}


@dataclass(frozen=True, slots=True)
class SentSignal:
    """One signal sent: its name and when (epoch seconds)."""

    name: str
    time: float


@dataclass(frozen=True, slots=True)
class KillReport:
    """What the kill notifier did (or refused to do) for one alert and one target process.

    `exit_status` follows subprocess's returncode: 0..255 the exit code, -N killed by signal N; None
    where unknown. `refused` says why nothing was signalled; `note` adds what else happened (the stop
    file asked first, a cancelled escalation). `program` (`python3 train.py`: no argument) is set only for a
    process that was signalled, `cmdline` (every argument) only then and with `report_cmdline: true`.
    """

    notifier: str
    fingerprint: str
    rule: str
    target: str
    pid: int | None
    host: str
    cmdline: str = ""
    program: str = ""
    signals: tuple[SentSignal, ...] = ()
    exited: bool = False
    exit_status: int | None = None
    refused: str | None = None
    dry_run: bool = False
    note: str = ""
    verified: str = ""
    """For target writer: how the writer was verified (`by holds: ...`, `by owner: ...`)."""

    @property
    def action(self) -> str:
        """What kind of action this reports (the announcement's `action` label)."""
        return "kill"

    def summary(self) -> str:
        """One line for people: what was done to which process, and how it ended."""
        who = f"pid {self.pid}" if self.pid is not None else "no process"
        if self.cmdline or self.program:
            who += f" ({(self.cmdline or self.program)[:CMDLINE_SHOWN]})"
        head = f"kill {self.notifier} for {self.rule}: "
        note = f"; {self.note}" if self.note else ""
        if self.verified:
            note += f"; writer verified {self.verified}"
        if self.refused is not None:
            return f"{head}REFUSED {who} on {self.host}: {self.refused}{note}"
        if self.dry_run:
            return f"{head}DRY RUN {who} on {self.host}: {self.note}"
        sent = ", ".join(f"{s.name} at {format_time(s.time)}" for s in self.signals)
        end = "exited" if self.exited else "still running"
        if self.exit_status is not None:
            end += f" with status {self.exit_status}"
        did = f"sent {sent} to" if sent else "sent no signal to"
        return f"{head}{did} {who} on {self.host}; {end}{note}"


@dataclass(frozen=True, slots=True)
class _Asked:
    """The outcome of the `ask_first` step for one alert."""

    path: Path | None
    error: str = ""
    at: float = 0.0
    """time.monotonic() when the file was created."""

    def note(self) -> str:
        if self.path is None:
            return f"could not ask via stop file: {self.error}"
        return f"asked to stop via {self.path}"


@dataclass(slots=True)
class _Job:
    base: KillReport
    handle: ProcessHandle
    program: str
    cmdline: str
    sent: list[SentSignal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class KillNotifier:
    """Stops the process behind a firing alert (see the module docstring for what is trusted).

    `report` receives every `KillReport` (the app turns it into a notification); `writers` looks up the
    verified writer of a run (None: `target: writer` always refuses), `claims` the run's event files the
    writer registry saw (None: only those in the run's directory now are checked); `hostname` overrides
    `socket.gethostname()` and `proc_root` the /proc tree (tests only: a fake tree is never signalled).
    """

    def __init__(
        self,
        name: str,
        cfg: KillConfig,
        *,
        report: Callable[[KillReport], Awaitable[None]] | None = None,
        writers: WriterLookup | None = None,
        claims: ClaimsLookup | None = None,
        child: ChildLookup | None = None,
        hostname: str | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.hostname = hostname or socket.gethostname()
        self.procfs = Procfs(proc_root)
        self._reports: Reports[KillReport] = Reports(f"kill {name}", log, report)
        self.history = self._reports.history
        self._targets = ProcessTargets(cfg, self.procfs, self.hostname, writers=writers, claims=claims, child=child)
        self._clock = clock or SystemClock()
        self._signals = [signal.Signals[n] for n in cfg.signals]
        self._asker = StopFileNotifier(name, cfg.ask_first.stop_file_config()) if cfg.ask_first else None
        self._acted = Firings()
        self._tasks: dict[asyncio.Task[None], _Job] = {}
        self._closed = False

    async def send(self, notification: Notification) -> None:
        """Act on each alert of `notification` that newly fires; refusals are reported, not raised."""
        if self._closed:
            raise NotifyError(f"kill notifier {self.name} is closed", recoverable=False)
        failure: Exception | None = None
        for alert in self._acted.fresh(notification, log, f"kill {self.name}"):
            self._acted.add(alert.firing_id)
            try:
                await self._act(alert)
            except Exception as e:  # a bug or an unreadable /proc: not worth a retry
                log.exception("kill %s: internal error on %s", self.name, alert.rule)
                failure = failure or e
        if failure is not None:
            raise NotifyError(f"kill notifier {self.name}: internal error: {failure}", recoverable=False) from failure

    async def aclose(self) -> None:
        """Stop running escalations (no further signals) and wait briefly for their reports."""
        self._closed = True
        running = dict(self._tasks)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CLOSE_WAIT)
        for task, job in running.items():
            if task.done() and task in self._tasks:  # cancelled before it ever ran: report it here
                del self._tasks[task]
                job.handle.close()
                job.notes.append(_cancelled(job.sent))
                await self._emit(self._final(job, None))

    async def wait_idle(self) -> None:
        """Wait until every running escalation has ended (tests and orderly shutdown)."""
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending)

    # -- finding the targets ---------------------------------------------------------------------

    async def _act(self, alert: Transition) -> None:
        labels = dict(alert.labels)
        host = (labels.get("host") or self.hostname) if self.cfg.target == "writer" else self.hostname
        base = KillReport(
            notifier=self.name,
            fingerprint=alert.fingerprint,
            rule=alert.rule,
            target=self.cfg.target,
            pid=None,
            host=host,
            dry_run=self.cfg.dry_run,
        )
        try:
            targets, refusals = await asyncio.to_thread(self._targets.resolve, alert)
        except Refused as r:
            targets, refusals = [], [(r.pid, r.reason, "")]
        asked = await self._ask(alert) if self._asker is not None and not self.cfg.dry_run else None
        for pid, reason, verified in refusals:
            note = f"{asked.note()}; nothing signalled" if asked is not None else ""
            await self._emit(replace(base, pid=pid, refused=reason, note=note, verified=verified))
        for info, verified in targets:
            await self._start(replace(base, verified=verified), info, alert, asked)

    # -- asking, signalling, escalating ----------------------------------------------------------

    async def _ask(self, alert: Transition) -> _Asked:
        assert self._asker is not None
        try:
            path = await self._asker.create(alert)
        except NotifyError as e:
            log.error("kill %s: could not create the stop file for %s: %s", self.name, alert.rule, e)
            return _Asked(None, str(e))
        log.warning("kill %s: asked to stop via %s (%s)", self.name, path, alert.rule)
        return _Asked(path, at=time.monotonic())

    def _plan(self, alert: Transition) -> str:
        plan = f"would send {', then '.join(self.cfg.signals)}, {self.cfg.grace:g}s apart; sent nothing"
        if self._asker is None or self.cfg.ask_first is None:
            return plan
        try:
            first = f"would create {self._asker.path_for(alert)} and wait {self.cfg.ask_first.wait:g}s"
        except NotifyError as e:
            first = f"could not ask via stop file ({e})"
        return f"{first}, then {plan}"

    async def _start(self, base: KillReport, info: ProcInfo, alert: Transition, asked: _Asked | None) -> None:
        handle = ProcessHandle(self.procfs, info)
        job = _Job(replace(base, pid=info.pid), handle, info.program, info.cmdline if self.cfg.report_cmdline else "")
        if self.cfg.dry_run:
            handle.close()
            await self._emit(replace(job.base, note=self._plan(alert)))
            return
        polite = asked if asked is not None and asked.path is not None else None
        if asked is not None and polite is None:
            job.notes.append(f"{asked.note()}; signalling at once")
        rest = self._signals
        if polite is None:
            first = self._signals[0]
            delivery = self._signal(job, first)
            if delivery is not Delivery.SENT:
                handle.close()
                refused = f"{_WHY[delivery]} before {first.name}: nothing sent"
                await self._emit(replace(job.base, refused=refused, note="; ".join(job.notes)))
                return
            rest = self._signals[1:]
        task = asyncio.create_task(self._escalate(job, rest, polite), name=f"kill-{self.name}-{info.pid}")
        self._tasks[task] = job

    def _signal(self, job: _Job, sig: signal.Signals) -> Delivery:
        delivery = job.handle.signal(sig)
        if delivery is Delivery.SENT:
            job.sent.append(SentSignal(sig.name, self._clock.now()))
            shown = (job.cmdline or job.program)[:CMDLINE_SHOWN]
            log.warning("kill %s: sent %s to pid %d (%s)", self.name, sig.name, job.handle.pid, shown)
        return delivery

    async def _escalate(self, job: _Job, rest: list[signal.Signals], polite: _Asked | None) -> None:
        seen: ExitSeen | None = None
        wait = self.cfg.ask_first.wait if self.cfg.ask_first is not None else 0.0
        try:
            if polite is not None:
                seen = await self._wait_exit(job.handle, wait)
                if seen is not None:
                    job.notes.append(f"{polite.note()}; exited after {time.monotonic() - polite.at:.1f} s")
                else:
                    job.notes.append(f"{polite.note()}; did not stop within {wait:g}s: escalating")
            for sig in rest if seen is None else []:
                if job.sent:
                    seen = await self._wait_exit(job.handle, self.cfg.grace)
                    if seen is not None:
                        break
                delivery = self._signal(job, sig)
                if delivery is Delivery.GONE:
                    seen = ExitSeen(None)
                    job.notes.append(f"process gone/reused before {sig.name}: nothing more sent")
                    break
                if delivery is Delivery.EXITED:
                    seen = job.handle.poll_exit() or ExitSeen(None)
                    break
                if delivery is Delivery.DENIED:
                    job.notes.append(f"{_WHY[delivery]} to send {sig.name}: nothing more sent")
                    break
            else:
                if seen is None and job.sent:
                    seen = await self._wait_exit(job.handle, self.cfg.grace)
                    if seen is None:
                        job.notes.append(f"still running {self.cfg.grace:g}s after {job.sent[-1].name}")
        except asyncio.CancelledError:
            job.notes.append(_cancelled(job.sent))
        finally:
            job.handle.close()
        try:
            await self._emit(self._final(job, seen))
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.pop(task, None)  # only now: wait_idle() returns after the report went out

    def _final(self, job: _Job, seen: ExitSeen | None) -> KillReport:
        return replace(
            job.base,
            cmdline=job.cmdline if job.sent else "",
            program=job.program if job.sent else "",
            signals=tuple(job.sent),
            exited=seen is not None,
            exit_status=seen.status if seen is not None else None,
            note="; ".join(job.notes),
        )

    async def _wait_exit(self, handle: ProcessHandle, timeout: float) -> ExitSeen | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            seen = handle.poll_exit()
            left = deadline - loop.time()
            if seen is not None or left <= 0:
                return seen
            await asyncio.sleep(min(POLL, left))

    async def _emit(self, report: KillReport) -> None:
        await self._reports.emit(report)


def _cancelled(sent: list[SentSignal]) -> str:
    if sent:
        return f"escalation cancelled at shutdown after {sent[-1].name}"
    return "escalation cancelled at shutdown before any signal was sent"
