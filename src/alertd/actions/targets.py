"""Which process (or Slurm job) an action acts on: the one module that resolves a target and proves it is
the right one. What is trusted, target by target, is in `alertd.actions.kill`'s docstring (processes) and
`alertd.actions.slurm`'s (jobs); everything here reads /proc (call it in a worker thread)."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from alertd.actions.base import Refused
from alertd.actions.config import KillConfig
from alertd.actions.procs import Procfs, ProcInfo, refusal
from alertd.filekind import file_kind
from alertd.model import Transition, format_time
from alertd.runs.slurmjobs import JOB_ID
from alertd.runs.writers import VerifiedWriter, WriterClaim, foreign_data
from alertd.userregex import compile_user_regex

WriterLookup = Callable[[str, str], VerifiedWriter | None]
"""(source, run) -> the run's verified writer, or None: `WriterRegistry.writer`."""
ClaimsLookup = Callable[[str, str, int | None], list[WriterClaim]]
"""(source, run, pid) -> the run's event files naming `pid` (None: all) that the last check saw:
`WriterRegistry.claims`."""
ChildLookup = Callable[[], tuple[int, int] | None]
"""alertd exec's child as (pid, start time in clock ticks) while it runs, else None."""

START_SLACK_TICKS = 2
"""Clock ticks a process may have started after a pidfile's mtime (mtimes come from a coarse clock)."""
PIDFILE_MAX = 64
"""A pidfile larger than this many bytes is refused unread."""
_PID_TEXT = re.compile(r"\s*([0-9]{1,10})\s*")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A process an action may act on, and what must hold of it (checked by `ProcessTargets.check`)."""

    pid: int
    start_ticks: int | None = None
    """The pinned identity (writer: the verified start time): another start time is another process."""
    born_before: float | None = None
    """The process must have started before this instant (pidfile: its mtime), epoch seconds."""
    owner_uid: int | None = None
    """The uid owning the pidfile: it may name only its own processes (root's and alertd's: any)."""
    what: str = ""
    verified: str = ""
    """The writer target: how it was verified (the report says it)."""
    own_data: Callable[[], str | None] | None = None
    """Checked last, once the process passed: why the alert's data may not be the target's own, or None."""


class ProcessTargets:
    """The processes a `kill` notifier's `target` names for an alert, each checked before it may be signalled.

    `writers` looks up a run's verified writer (None: `target: writer` always refuses), `claims` the run's
    event files the writer registry saw, `child` alertd exec's child; `hostname` is this machine's name.
    """

    def __init__(
        self,
        cfg: KillConfig,
        procfs: Procfs,
        hostname: str,
        *,
        writers: WriterLookup | None = None,
        claims: ClaimsLookup | None = None,
        child: ChildLookup | None = None,
    ) -> None:
        self._cfg = cfg
        self.procfs = procfs
        self.hostname = hostname
        self._writers = writers
        self._claims = claims
        self._child = child

    def resolve(self, alert: Transition) -> tuple[list[tuple[ProcInfo, str]], list[tuple[int | None, str, str]]]:
        """The processes to signal and the refused candidates (blocking /proc reads: a worker thread), each
        with how it was verified (the writer target; else "")."""
        targets: list[tuple[ProcInfo, str]] = []
        refusals: list[tuple[int | None, str, str]] = []
        for cand in self._candidates(alert):
            info = self.procfs.read(cand.pid)
            try:
                self.check(cand, info)
            except Refused as r:
                refusals.append((cand.pid, r.reason, cand.verified))
                continue
            assert info is not None
            targets.append((info, cand.verified))
        return targets, refusals

    def _candidates(self, alert: Transition) -> list[Candidate]:
        target = self._cfg.target
        if target == "writer":
            return [self._writer(alert)]
        if target == "pid":
            assert self._cfg.pid is not None
            return [Candidate(self._cfg.pid)]
        if target == "pidfile":
            return [self._pidfile()]
        if target == "child":
            return [self._child_target(alert)]
        return [Candidate(info.pid, start_ticks=info.start_ticks) for info in self._cmdline_matches()]

    def _child_target(self, alert: Transition) -> Candidate:
        child = self._child() if self._child is not None else None
        if child is None:
            raise Refused("target child: no child process (it is alertd exec's trainer: is alertd running as exec?)")
        pid, start_ticks = child
        labels = dict(alert.labels)
        named, host = labels.get("pid") or str(pid), labels.get("host")
        # The data names the process that wrote it: it must be the child, or one of its own (a torchrun rank).
        here = host is None or host == self.hostname
        if here and named != str(pid) and (not named.isdigit() or pid not in self.procfs.ancestors(int(named))):
            raise Refused(
                f"the data comes from pid {named}, which is neither the child (pid {pid}) nor one of its "
                "descendants: an earlier run's alert is not acted on",
                pid,
            )
        return Candidate(pid, start_ticks=start_ticks, what=f"the child (pid {pid})")

    def check(self, cand: Candidate, info: ProcInfo | None) -> None:
        if cand.start_ticks is not None and (info is None or info.start_ticks != cand.start_ticks):
            now = "is free" if info is None else "now names another process"
            raise Refused(f"{cand.what or f'pid {cand.pid}'} has exited: pid {cand.pid} {now}", cand.pid)
        reason = refusal(self.procfs, cand.pid, info, allow_other_users=self._cfg.allow_other_users)
        if reason is not None:
            raise Refused(reason, cand.pid)
        assert info is not None
        if cand.owner_uid is not None and cand.owner_uid not in (0, os.getuid(), info.uid):
            raise Refused(
                f"{cand.what} by uid {cand.owner_uid}, but pid {cand.pid} belongs to uid {info.uid}: "
                "a pidfile names only processes of its owner",
                cand.pid,
            )
        if cand.born_before is not None:
            limit = self.procfs.ticks_at(cand.born_before) + START_SLACK_TICKS
            if info.start_ticks > limit:
                started = self.procfs.start_epoch(info)
                raise Refused(
                    f"pid {cand.pid} started at {format_time(started)}, after {cand.what} "
                    f"({format_time(cand.born_before)}): the pid now names another process",
                    cand.pid,
                )
        foreign = cand.own_data() if cand.own_data is not None else None
        if foreign is not None:
            raise Refused(f"{foreign}: not acting on {cand.what}", cand.pid)

    def _writer(self, alert: Transition) -> Candidate:
        labels = dict(alert.labels)
        if self._writers is None:
            raise Refused("no writer registry: target writer acts only on a writer alertd has verified")
        source, run = labels.get("source"), labels.get("run")
        if source is None or run is None:
            raise Refused("the alert has no source and run labels: target writer acts only on a run's verified writer")
        host = labels.get("host")
        if host is not None and host != self.hostname:
            raise Refused(f"the data comes from host {host!r}, not this machine ({self.hostname!r})")
        w = self._writers(source, run)
        if w is None:
            raise Refused(
                f"no writer of run {run!r} (source {source!r}) has been verified (holding one of its event files "
                "open, or owning one it started before): a pid in a file name is not trusted"
            )
        if w.host != self.hostname:
            raise Refused(f"the verified writer of run {run!r} runs on host {w.host!r}, not {self.hostname!r}")
        named = labels.get("pid")
        if named is not None and named != str(w.pid):
            raise Refused(
                f"the data comes from an event file named for pid {named}, but the verified writer of run "
                f"{run!r} is pid {w.pid} ({w.path}): not acting on a process that did not write it"
            )
        what = f"the verified writer of run {run!r} (pid {w.pid})"
        if not w.alive:
            raise Refused(f"{what} has exited", w.pid)
        claims = self._claims

        def own_data() -> str | None:
            return foreign_data(w, claims(source, run, None) if claims is not None else (), host, named)

        return Candidate(w.pid, start_ticks=w.start_ticks, what=what, verified=w.evidence, own_data=own_data)

    def _pidfile(self) -> Candidate:
        assert self._cfg.pidfile is not None
        path = self._cfg.pidfile
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            raise Refused(f"pidfile {path} does not exist") from None
        except OSError as e:
            raise Refused(f"pidfile {path} can't be read: {e.strerror}") from None
        if not stat.S_ISREG(lst.st_mode):
            raise Refused(f"pidfile {path} is {file_kind(lst.st_mode)}, not a regular file: not read")
        if lst.st_size > PIDFILE_MAX:
            raise Refused(f"pidfile {path} is {lst.st_size} bytes: a pidfile holds at most {PIDFILE_MAX}; not read")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Refused(f"pidfile {path} is a symbolic link, not a regular file: not read") from None
            raise Refused(f"pidfile {path} can't be read: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino) or not stat.S_ISREG(st.st_mode):
                raise Refused(f"pidfile {path} was replaced while it was read: not trusted")
            data = os.read(fd, PIDFILE_MAX + 1)
        finally:
            os.close(fd)
        text = data.decode("ascii", errors="replace")
        m = _PID_TEXT.fullmatch(text)
        if len(data) > PIDFILE_MAX or m is None:
            raise Refused(f"pidfile {path} does not hold a process id: {text[:40]!r}")
        return Candidate(
            int(m.group(1)), born_before=st.st_mtime, owner_uid=st.st_uid, what=f"pidfile {path} was written"
        )

    def _cmdline_matches(self) -> list[ProcInfo]:
        assert self._cfg.cmdline is not None
        rx = compile_user_regex(self._cfg.cmdline)
        ancestors = set(self.procfs.ancestors(os.getpid()))
        found: list[ProcInfo] = []
        ignored = 0
        for pid in self.procfs.pids():
            info = self.procfs.read(pid)
            if info is None or not rx.search(info.cmdline):
                continue
            if refusal(self.procfs, pid, info, allow_other_users=self._cfg.allow_other_users, ancestors=ancestors):
                ignored += 1  # another user's, a zombie, alertd or an ancestor: neither counted nor matched
                continue
            found.append(info)
        besides = f" ({ignored} other matching process(es) alertd may not signal were ignored)" if ignored else ""
        if not found:
            raise Refused(f"no process that alertd may signal matches cmdline {self._cfg.cmdline!r}{besides}")
        if len(found) > 1 and not self._cfg.all:
            pids = ", ".join(str(i.pid) for i in found)
            raise Refused(
                f"cmdline {self._cfg.cmdline!r} matches {len(found)} processes (pids {pids}); "
                f"it must match exactly one (or set all: true){besides}"
            )
        return found


class SlurmJobTargets:
    """The Slurm job a `slurm` notifier acts on for an alert, attributed exactly (`job_from`): the alert's
    `slurm_job_id` label, trusted only from the config's `slurm` sources (`slurm_sources`, a set or a function
    asked at each alert), and/or the `SLURM_JOB_ID` of the run's verified writer, whose data must be its own."""

    def __init__(
        self,
        job_from: Iterable[str],
        procfs: Procfs,
        hostname: str,
        *,
        writers: WriterLookup | None = None,
        claims: ClaimsLookup | None = None,
        slurm_sources: Iterable[str] | Callable[[], Iterable[str]] = (),
    ) -> None:
        self._job_from = tuple(job_from)
        self.procfs = procfs
        self.hostname = hostname
        self._writers = writers
        self._claims = claims
        self._slurm_sources = slurm_sources

    def slurm_sources(self) -> frozenset[str]:
        """The names of the sources whose `slurm_job_id` label is trusted: the config's `slurm` sources."""
        names = self._slurm_sources
        return frozenset(names() if callable(names) else names)

    def attribute(self, alert: Transition) -> tuple[str, str]:
        """(job id, how it was attributed) for the alert; Refused when none is, exactly."""
        labels = dict(alert.labels)
        host = labels.get("host")
        if host is not None and host != self.hostname:
            raise Refused(f"the alert comes from host {host!r}, not this machine ({self.hostname!r})")
        found: dict[str, str] = {}
        untrusted = ""
        if "label" in self._job_from and "slurm_job_id" in labels:
            value = labels["slurm_job_id"]
            trusted = self.slurm_sources()
            if labels.get("source") not in trusted:
                said = f"source {labels['source']!r}" if "source" in labels else "no source"
                slurm = ", ".join(sorted(trusted)) or "none"
                untrusted = (
                    f"; its slurm_job_id label is not taken: the alert comes from {said}, not from a slurm "
                    f"source of this config ({slurm})"
                )
                labels = {k: v for k, v in labels.items() if k != "slurm_job_id"}
            elif not JOB_ID.fullmatch(value):
                raise Refused(f"the slurm_job_id label {value[:40]!r} is not a job id")
            else:
                found["label"] = value
        if "writer" in self._job_from:
            got = self._from_writer(labels)
            if got is not None:
                found[got[1]] = got[0]
        if not found:
            wants = " or ".join(
                {"label": "a slurm_job_id label", "writer": "a verified writer with SLURM_JOB_ID"}[w]
                for w in self._job_from
            )
            raise Refused(f"the alert has no attributable Slurm job (it needs {wants}){untrusted}")
        ids = set(found.values())
        if len(ids) > 1:
            said = ", ".join(f"{how} says {job}" for how, job in found.items())
            raise Refused(f"the job is ambiguous: {said}")
        return ids.pop(), " and ".join(found)

    def _from_writer(self, labels: dict[str, str]) -> tuple[str, str] | None:
        """(job id, how) from the run's verified writer's environment; None where there is no writer to
        ask; Refused where the writer is known but does not name its job exactly."""
        source, run = labels.get("source"), labels.get("run")
        if self._writers is None or source is None or run is None:
            return None
        w = self._writers(source, run)
        if w is None:
            return None
        how = f"writer pid {w.pid}"
        if w.host != self.hostname:
            raise Refused(f"the verified writer of run {run!r} runs on host {w.host!r}, not {self.hostname!r}")
        if not w.alive:
            raise Refused(f"the verified writer of run {run!r} (pid {w.pid}) has exited")
        claims = self._claims(source, run, None) if self._claims is not None else ()
        foreign = foreign_data(w, claims, labels.get("host"), labels.get("pid"))
        if foreign is not None:
            raise Refused(f"{foreign}: not acting on the job of the verified writer of run {run!r} (pid {w.pid})")
        env = self.procfs.environ(w.pid, w.start_ticks)
        if env is None:
            raise Refused(f"the environment of the verified writer (pid {w.pid}) can't be read (gone, or not ours)")
        job = env.get("SLURM_JOB_ID")
        if job is None:
            return None if "label" in self._job_from and "slurm_job_id" in labels else self._no_job(w.pid)
        if not JOB_ID.fullmatch(job):
            raise Refused(f"the writer's SLURM_JOB_ID {job[:40]!r} is not a job id")
        return job, how

    def _no_job(self, pid: int) -> tuple[str, str]:
        raise Refused(f"the verified writer (pid {pid}) does not run in a Slurm job (no SLURM_JOB_ID)")
