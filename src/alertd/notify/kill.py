"""The kill notifier: stops a training process, exactly and safely (design section 7).

For each alert that turns FIRING (once per firing: the key is the alert's fingerprint and `active_at`, so
repeats and re-sends do nothing; resolutions never act), the notifier finds the target process
(`KillConfig.target`), checks that it may stop it (`procs.refusal`: never pid 1, itself, its ancestors,
a zombie, a kernel thread or another user's process), pins it by pid and start time, and sends the
signals of `KillConfig.signals` in order, `grace` seconds apart, until the process exits. The identity
is checked again before every signal: a pid that now names another process is never signalled.

Policy choices:
- A refusal (target not found, not allowed, on another host, ambiguous) is not a delivery failure that a
  retry could fix: it is logged at error level and reported, and `send` does not raise. Internal errors
  (a bug, an unreadable /proc) raise `NotifyError(recoverable=False)`.
- `send` sends the first signal itself, then the escalation runs as a background task, so the delivery
  pipeline never waits through the grace periods. One `KillReport` per target is handed to `report`
  and kept in `history` once the escalation ends (at once for refusals and dry runs).
- For target `writer`, a process that started after the alert became active can't have written the
  data behind it: the pid was reused, and it is refused. For `pidfile`, the same holds for a process
  that started after the pidfile was written.
- `aclose()` stops every running escalation: no signal is sent after it is called (the first, polite
  signal has already gone out). Each stopped escalation is reported with the note "escalation cancelled
  at shutdown"; `aclose` waits up to `CLOSE_WAIT` seconds for those reports.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from alertd.clock import Clock, SystemClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, format_time
from alertd.notify.config import KillConfig
from alertd.notify.procs import Delivery, ExitSeen, ProcessHandle, Procfs, ProcInfo, refusal

log = logging.getLogger(__name__)

POLL = 0.05
"""Seconds between two looks at /proc while waiting for the target to exit."""
STARTED_SLACK = 2.0
"""Seconds of tolerance when comparing a process start time (whole-second boot time) with an instant."""
CLOSE_WAIT = 5.0
"""Seconds `aclose` waits for the reports of the escalations it stopped."""
_ACTED_MAX = 10_000
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
    where unknown. `refused` says why nothing was signalled; `note` adds what else happened.
    """

    notifier: str
    fingerprint: str
    rule: str
    target: str
    pid: int | None
    host: str
    cmdline: str = ""
    signals: tuple[SentSignal, ...] = ()
    exited: bool = False
    exit_status: int | None = None
    refused: str | None = None
    dry_run: bool = False
    note: str = ""

    def summary(self) -> str:
        """One line for people: what was done to which process, and how it ended."""
        who = f"pid {self.pid}" if self.pid is not None else "no process"
        if self.cmdline:
            who += f" ({self.cmdline[:80]})"
        head = f"kill {self.notifier} for {self.rule}: "
        if self.refused is not None:
            return f"{head}REFUSED {who} on {self.host}: {self.refused}"
        if self.dry_run:
            return f"{head}DRY RUN {who} on {self.host}: {self.note}"
        sent = ", ".join(f"{s.name} at {format_time(s.time)}" for s in self.signals)
        end = "exited" if self.exited else "still running"
        if self.exit_status is not None:
            end += f" with status {self.exit_status}"
        return f"{head}sent {sent} to {who} on {self.host}; {end}" + (f"; {self.note}" if self.note else "")


class Refused(Exception):
    """The target can't or mustn't be signalled: reported, never retried."""

    def __init__(self, reason: str, pid: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pid = pid


@dataclass(frozen=True, slots=True)
class _Candidate:
    pid: int
    born_before: float | None = None
    """The process must have started before this instant (writer: the alert; pidfile: its mtime)."""
    what: str = ""


class KillNotifier:
    """Stops the process behind a firing alert: first signal at once, escalation in the background.

    `report` receives every `KillReport` (the app turns it into a notification); `hostname` overrides
    `socket.gethostname()` and `proc_root` the /proc tree (tests only: a fake tree is never signalled).
    """

    def __init__(
        self,
        name: str,
        cfg: KillConfig,
        *,
        report: Callable[[KillReport], Awaitable[None]] | None = None,
        hostname: str | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.hostname = hostname or socket.gethostname()
        self.procfs = Procfs(proc_root)
        self.history: list[KillReport] = []
        self._report = report
        self._clock = clock or SystemClock()
        self._signals = [signal.Signals[n] for n in cfg.signals]
        self._acted: dict[tuple[str, float], None] = {}
        self._tasks: dict[asyncio.Task[None], tuple[KillReport, ProcessHandle, list[SentSignal]]] = {}
        self._closed = False

    async def send(self, notification: Notification) -> None:
        """Act on each alert of `notification` that newly fires; refusals are reported, not raised."""
        if self._closed:
            raise NotifyError(f"kill notifier {self.name} is closed", recoverable=False)
        failure: Exception | None = None
        for alert in notification.alerts:
            if alert.state is not TransitionKind.FIRING:
                continue
            key = alert.firing_id
            if key in self._acted:
                log.info("kill %s: already acted on %s (%s), nothing to do", self.name, alert.rule, key[0])
                continue
            self._remember(key)
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
        for task, (base, handle, sent) in running.items():
            if task.done() and task in self._tasks:  # cancelled before it ever ran: report it here
                del self._tasks[task]
                handle.close()
                note = f"escalation cancelled at shutdown after {sent[-1].name}"
                await self._emit(replace(base, signals=tuple(sent), note=note))

    async def wait_idle(self) -> None:
        """Wait until every running escalation has ended (tests and orderly shutdown)."""
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending)

    def _remember(self, key: tuple[str, float]) -> None:
        self._acted[key] = None
        while len(self._acted) > _ACTED_MAX:
            del self._acted[next(iter(self._acted))]

    async def _act(self, alert: Transition) -> None:
        host = dict(alert.labels).get("host", self.hostname) if self.cfg.target == "writer" else self.hostname
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
            candidates = self._candidates(alert)
        except Refused as r:
            await self._emit(replace(base, pid=r.pid, refused=r.reason))
            return
        for cand in candidates:
            info = self.procfs.read(cand.pid)
            try:
                self._check(cand, info)
            except Refused as r:
                cmd = info.cmdline if info is not None else ""
                await self._emit(replace(base, pid=cand.pid, cmdline=cmd, refused=r.reason))
                continue
            assert info is not None
            await self._start(replace(base, pid=info.pid, cmdline=info.cmdline), info)

    def _candidates(self, alert: Transition) -> list[_Candidate]:
        target = self.cfg.target
        if target == "writer":
            born = alert.since
            return [_Candidate(self._writer_pid(alert), born, "the alert became active")]
        if target == "pid":
            assert self.cfg.pid is not None
            return [_Candidate(self.cfg.pid)]
        if target == "pidfile":
            return [self._pidfile_pid()]
        return [_Candidate(info.pid) for info in self._cmdline_matches()]

    def _check(self, cand: _Candidate, info: ProcInfo | None) -> None:
        reason = refusal(self.procfs, cand.pid, info, allow_other_users=self.cfg.allow_other_users)
        if reason is not None:
            raise Refused(reason, cand.pid)
        assert info is not None
        if cand.born_before is not None:
            started = self.procfs.start_epoch(info)
            if started > cand.born_before + STARTED_SLACK:
                raise Refused(
                    f"pid {cand.pid} started at {format_time(started)}, after {cand.what} "
                    f"({format_time(cand.born_before)}): the pid now names another process",
                    cand.pid,
                )

    def _writer_pid(self, alert: Transition) -> int:
        labels = dict(alert.labels)
        raw, host = labels.get("pid"), labels.get("host")
        if raw is None:
            raise Refused("the alert has no pid label (target writer needs event file names with host and pid)")
        if host is None:
            raise Refused(f"the alert has no host label: can't tell that pid {raw} runs on this machine")
        if not self._same_host(host):
            raise Refused(f"the writer runs on host {host!r}, not on this machine ({self.hostname!r})")
        if not raw.isdigit():
            raise Refused(f"the pid label {raw!r} is not a process id")
        return int(raw)

    def _same_host(self, host: str) -> bool:
        a, b = host.lower(), self.hostname.lower()
        return a == b or a.split(".")[0] == b.split(".")[0]

    def _pidfile_pid(self) -> _Candidate:
        assert self.cfg.pidfile is not None
        path = Path(self.cfg.pidfile)
        try:
            text = path.read_text(errors="replace")
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            raise Refused(f"pidfile {path} does not exist") from None
        except OSError as e:
            raise Refused(f"pidfile {path} can't be read: {e.strerror}") from None
        if not text.strip().isdigit():
            raise Refused(f"pidfile {path} does not hold a process id: {text[:40]!r}")
        return _Candidate(int(text.strip()), mtime, f"pidfile {path} was written")

    def _cmdline_matches(self) -> list[ProcInfo]:
        assert self.cfg.cmdline is not None
        rx = re.compile(self.cfg.cmdline)
        me = os.getpid()
        skip = {me, *self.procfs.ancestors(me)}
        found = []
        for pid in self.procfs.pids():
            info = self.procfs.read(pid) if pid not in skip else None
            if info is not None and not info.zombie and not info.kernel_thread and rx.search(info.cmdline):
                found.append(info)
        if not found:
            raise Refused(f"no process matches cmdline {self.cfg.cmdline!r}")
        if len(found) > 1 and not self.cfg.all:
            pids = ", ".join(str(i.pid) for i in found)
            raise Refused(
                f"cmdline {self.cfg.cmdline!r} matches {len(found)} processes (pids {pids}); "
                "it must match exactly one (or set all: true)"
            )
        return found

    async def _start(self, base: KillReport, info: ProcInfo) -> None:
        handle = ProcessHandle(self.procfs, info)
        if self.cfg.dry_run:
            handle.close()
            plan = ", then ".join(self.cfg.signals)
            note = f"would send {plan}, {self.cfg.grace:g}s apart; sent nothing"
            await self._emit(replace(base, note=note))
            return
        first = self._signals[0]
        delivery = handle.signal(first)
        if delivery is not Delivery.SENT:
            handle.close()
            await self._emit(replace(base, refused=f"{_WHY[delivery]} before {first.name}: nothing sent"))
            return
        sent = [SentSignal(first.name, self._clock.now())]
        log.warning("kill %s: sent %s to pid %d (%s)", self.name, first.name, info.pid, info.cmdline[:80])
        task = asyncio.create_task(self._escalate(base, handle, sent), name=f"kill-{self.name}-{info.pid}")
        self._tasks[task] = (base, handle, sent)

    async def _escalate(self, base: KillReport, handle: ProcessHandle, sent: list[SentSignal]) -> None:
        seen: ExitSeen | None = None
        note = ""
        try:
            for nxt in [*self._signals[1:], None]:
                seen = await self._wait_exit(handle, self.cfg.grace)
                if seen is not None:
                    break
                if nxt is None:
                    note = f"still running {self.cfg.grace:g}s after {sent[-1].name}"
                    break
                delivery = handle.signal(nxt)
                if delivery is Delivery.GONE:
                    seen, note = ExitSeen(None), f"process gone/reused before {nxt.name}: nothing more sent"
                    break
                if delivery is Delivery.EXITED:
                    seen = handle.poll_exit() or ExitSeen(None)
                    break
                if delivery is Delivery.DENIED:
                    note = f"{_WHY[delivery]} to send {nxt.name}: nothing more sent"
                    break
                sent.append(SentSignal(nxt.name, self._clock.now()))
                log.warning("kill %s: escalated to %s on pid %d", self.name, nxt.name, handle.pid)
        except asyncio.CancelledError:
            note = f"escalation cancelled at shutdown after {sent[-1].name}"
        finally:
            handle.close()
        status = seen.status if seen is not None else None
        try:
            await self._emit(replace(base, signals=tuple(sent), exited=seen is not None, exit_status=status, note=note))
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.pop(task, None)  # only now: wait_idle() returns after the report went out

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
        self.history.append(report)
        log.log(logging.ERROR if report.refused else logging.WARNING, "%s", report.summary())
        if self._report is None:
            return
        try:
            await self._report(report)
        except Exception:
            log.exception("kill %s: the report callback failed", self.name)
