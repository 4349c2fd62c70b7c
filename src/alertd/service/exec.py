"""`alertd exec -- COMMAND ...`: the trainer as alertd's own child, watched and supervised; alertd exits with
its status. The child and its output: `alertd.service.child`; the stop the built-in rules add:
`alertd.service.exec_stop`; whether a child that crashed is started again: `alertd.runs.restart` (the attempts
are counted here, in memory: a SIGKILLed alertd exec takes its child with it, and restarts nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alertd.actions.config import RecoverConfig
from alertd.dispatch.announce import ActionReport
from alertd.dispatch.outbox import STATE_DIR_ENV, StateDirError, StateDirLocked
from alertd.durations import format_duration
from alertd.errors import ConfigError
from alertd.integrations.ledger import last_good
from alertd.integrations.plan import PLAN_ENV, PLAN_NAME, RUN_INFO_ENV
from alertd.integrations.resume import ATTEMPT_ENV, CHECKPOINTS_ENV, RESUME_ENV
from alertd.integrations.stop import DEFAULT_STOP_NAME, STOP_FILE_ENV
from alertd.logs import setup_logging
from alertd.model import Sample
from alertd.runs.procfs import Procfs
from alertd.runs.restart import FINISHED, RESTARTABLE, AttemptEnd, Decision, RestartPolicy
from alertd.service.child import ChildRun
from alertd.service.engine import log
from alertd.service.exec_stop import with_exec_stop
from alertd.service.main import serve, token_problem
from alertd.service.recovery import RUN_INFO_NAME, ExecRecovery, Pending
from alertd.service.service import Service
from alertd.sources.textlog.stream import EVENT

EXEC_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals `alertd exec` takes for its child: forwarded (see `_forward_signals`), never its own end."""
JOB_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""Signals a job's supervisor sends to every process of the job (Slurm's `scancel --signal=USR1 --full`): one
from an ancestor of alertd reached the child too, and is not sent to it twice."""
RANK_SCAN = 1.0
"""Seconds between two looks for the ranks among the child's processes (`Procfs.rank_processes`)."""
EXEC_DRAIN = 10.0
"""Seconds `alertd exec` waits, after its child exited, for the notifications of its end to go out."""
_SI_KERNEL = 0x80


def run_exec(
    argv: Sequence[str],
    paths: Sequence[str],
    *,
    run: str | None = None,
    listen: str | None = None,
    state_dir: str | None = None,
    log_format: str = "auto",
    stop: bool = False,
    restart: RestartOverrides | None = None,
    checkpoints: str | None = None,
) -> int:
    """`alertd exec -- COMMAND ...`: run the trainer as a child, watched; exit with its status.

    alertd's logs and console notifications go to stderr (its stdout is the child's). SIGINT, SIGTERM
    and SIGHUP sent to alertd are forwarded to the child; one the terminal sent to the whole process
    group (Ctrl-C) reached the child already and is not sent twice. The status is the child's exit
    code, 128+N when a signal N ended it, 127 when the command does not exist, and 2 when the rules
    files are bad or no state directory can be had (the child is then not started).

    The state lives in `state_dir` (`--state-dir`, else $ALERTD_STATE_DIR), else in one of its own per run
    name, `./.state/exec/<run>` (`<run>.2`, ... while another alertd exec of that name holds it), so that an
    exec starts its trainer beside a service using `./.state`. `stop`: add the exec stop to the rules
    (`alertd.service.exec_stop`; the built-in rules without `--no-stop`). `restart` (`--restart-on`,
    `--max-restarts`, `--restart-backoff`) and `checkpoints` (`--checkpoints`) override the rules files' `exec:`.
    """
    setup_logging(log_format)
    if (why := token_problem(listen)) is not None:
        log.error("%s", why)
        return 2
    name = run or _run_name(argv)
    explicit = state_dir or os.environ.get(STATE_DIR_ENV)
    stop_file = None
    own = os.environ.get(STOP_FILE_ENV, "")
    service: Service | None = None
    for directory in [Path(explicit)] if explicit else _exec_state_dirs(name):
        if stop:  # the stop file the child's callbacks will look for: its own (absolute), else in the state
            stop_file = own if os.path.isabs(own) else str((directory / DEFAULT_STOP_NAME).absolute())
        amend = (lambda config, path=stop_file: with_exec_stop(config, path)) if stop_file else None
        try:
            service = Service(paths, console=sys.stderr, exec_mode=True, state=directory, amend=amend, freeze_heap=True)
            break
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("%s", problem)
            return 2
        except StateDirLocked as exc:
            if explicit:
                log.error(
                    "%s: give this alertd exec a state directory of its own (alertd exec --state-dir DIR -- ...)", exc
                )
                return 2
            log.info("alertd exec: %s; trying the next", exc)
        except StateDirError as exc:
            log.error("%s (alertd exec --state-dir DIR chooses another)", exc)
            return 2
    if service is None:
        log.error("alertd exec: every state directory for run %s is in use: give one with --state-dir DIR", name)
        return 2
    on_slurm = sorted(
        n for n, c in service.config.notifiers.items() if isinstance(c, RecoverConfig) and c.target == "slurm"
    )
    if on_slurm:
        log.error(
            "alertd exec: notifier %s is a recover with target: slurm, which requeues a Slurm job from the alertd "
            "service; under alertd exec the run is the child: use target: child (the default)",
            on_slurm[0],
        )
        service.state.close()  # the child is not started: nothing to save
        return 2
    recovering = any(cfg.type == "recover" for cfg in service.config.notifiers.values())
    if recovering and stop_file is None:  # recover stops the child through its callbacks first
        stop_file = own if os.path.isabs(own) else str((service.state_dir / DEFAULT_STOP_NAME).absolute())
    env = {}
    if recovering:
        env[RUN_INFO_ENV] = str((service.state_dir / RUN_INFO_NAME).absolute())
    if stop_file is not None and stop_file != own:
        env[STOP_FILE_ENV] = stop_file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stop_file)  # an earlier child's request it never honoured (a script without the callbacks)
    # Block the signals before any thread exists, so that only the forwarding thread takes them.
    policy = (restart or RestartOverrides()).apply(service.config.restart)
    ledger = checkpoints or service.config.checkpoints
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, EXEC_SIGNALS)
    try:
        status = asyncio.run(_exec_main(service, list(argv), name, listen, env, policy, ledger, stop_file, recovering))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if status is None:
        return 127
    return 128 - status if status < 0 else status


@dataclass(frozen=True)
class RestartOverrides:
    """The command line's restart flags; None: as the rules files say."""

    on: tuple[str, ...] | None = None
    max_restarts: int | None = None
    backoff: float | None = None

    def apply(self, policy: RestartPolicy | None) -> RestartPolicy | None:
        """The policy in force: the file's (None: no restarts) with the flags given over it; any flag turns
        restarts on with the defaults for the rest; `--max-restarts 0` turns them off."""
        if self.on is None and self.max_restarts is None and self.backoff is None:
            return policy
        base = policy or RestartPolicy()
        new = RestartPolicy.of(
            self.on if self.on is not None else base.on,
            self.max_restarts if self.max_restarts is not None else base.max_restarts,
            self.backoff if self.backoff is not None else base.backoff,
        )
        return new if new.max_restarts > 0 else None


EXEC_STATE_DIRS = 9
"""State directories `alertd exec` tries per run name: `<run>`, then `<run>.2` ... `<run>.9`."""


def _exec_state_dirs(run: str) -> list[Path]:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:100].lstrip(".") or "run"
    base = Path(".state") / "exec"
    return [base / safe, *(base / f"{safe}.{n}" for n in range(2, EXEC_STATE_DIRS + 1))]


class _Supervision:
    """What the signal thread and the restart loop share: the child of the attempt under way (None between
    attempts) and whether a signal from outside came during it."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.child: ChildRun | None = None
        self.signalled: signal.Signals | None = None
        self.wake = wake


async def _exec_main(
    service: Service,
    argv: list[str],
    run: str,
    listen: str | None,
    env: dict[str, str] | None = None,
    restart: RestartPolicy | None = None,
    checkpoints: str | None = None,
    stop_file: str | None = None,
    recovering: bool = False,
) -> int | None:
    loop = asyncio.get_running_loop()
    main = asyncio.create_task(serve(service, listen, handle_signals=False))
    while not service.ready:
        if main.done():
            await main
            return None
        await asyncio.sleep(0.01)
    woken = asyncio.Event()
    sup = _Supervision(lambda: _call_soon(loop, woken.set))
    acted = _action_reports(service)
    env = dict(env or {})
    if checkpoints is not None:
        env[CHECKPOINTS_ENV] = os.path.abspath(checkpoints)
    _earlier_run_ended(service, "exec", run)  # restored alerts of an earlier child: that run is over
    recovery = _recovery(service, run, sup, checkpoints, stop_file, env) if recovering else None
    nexts = _Next(service, sup, woken, run, restart, recovery, env, checkpoints)
    attempt, pending = nexts.first()
    status, forwarding = None, False
    while True:
        events: set[str] = set()

        def deliver(samples: list[Sample], events: set[str] = events) -> None:
            events.update(s.series.label("event") or "" for s in samples if s.series.metric == EVENT)
            loop.call_soon_threadsafe(lambda: service.ingest(samples, service.clock.now()))

        labels = {}
        if restart is not None or recovery is not None:
            labels["attempt"] = env[ATTEMPT_ENV] = str(attempt)
        child = ChildRun(argv, run=run, on_samples=deliver, env=env, labels=labels)
        sup.signalled, reports = None, len(acted)
        try:
            pid = child.start()
        except OSError as exc:
            log.error("alertd exec: can't start %s: %s", argv[0], exc.strerror or exc)
            if status is None:
                service.stop()
                await main
                return None
            break  # a restart that can't start: the run ends as the last attempt did
        service.child = sup.child = child
        if not forwarding:
            threading.Thread(target=_forward_signals, args=(sup,), name="exec-signals", daemon=True).start()
            forwarding = True
        log.info("alertd exec: started %s (pid %d) as run %s%s", argv[0], pid, run, _nth(attempt, restart))
        if recovery is not None:
            recovery.started(attempt, events, pending)
        scan = asyncio.create_task(_watch_ranks(service, child, pid))
        status = await loop.run_in_executor(None, child.wait)
        scan.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scan
        sup.child = None
        log.info("alertd exec: %s (pid %d) exited with status %d", argv[0], pid, status)
        failed = child.failure.rank if status != 0 else None
        if failed is not None:
            log.warning("alertd exec: run %s: rank %s failed first (the launcher's own summary)", run, failed)
        now = service.clock.now()
        stop_asked = _stop_asked(service, child.source, run)
        ended = service.engine.runs.exited(child.source, run, status, now, rank=failed)
        service.evaluate_with(ended, now)  # its end, at once
        await service.deliveries.drain(list(service.notifiers.values()), EXEC_DRAIN)  # actions report the end
        stopped = stop_asked or len(acted) > reports or (stop_file is not None and os.path.exists(stop_file))
        end = AttemptEnd(status, sup.signalled is not None, stopped, frozenset(events))
        nxt = await nexts.after(end, attempt)
        if nxt is None:
            break
        attempt, pending = nxt
        now = service.clock.now()
        service.evaluate_with(service.engine.runs.started_again(child.source, run, now), now)  # a new episode
    sup.wake = lambda: None
    if recovery is not None:
        await recovery.aclose()
        recovery.finished()  # the run is over (finished, given up, interrupted): its record goes
    receivers = list(service.notifiers.values())
    try:
        service.deliveries.flush_groups()  # alertd ends with its child: what waits in a group is told now
    except sqlite3.Error as exc:
        service.state_failed(exc)
    await service.deliveries.drain(receivers, EXEC_DRAIN)
    service.stop()
    await main
    return status


class _Next:
    """Which attempt comes next: the one a recovery planned (`recover`), else the one the restart policy allows."""

    def __init__(
        self,
        service: Service,
        sup: _Supervision,
        woken: asyncio.Event,
        run: str,
        restart: RestartPolicy | None,
        recovery: ExecRecovery | None,
        env: dict[str, str],
        checkpoints: str | None,
    ) -> None:
        self.service, self.sup, self.woken, self.run = service, sup, woken, run
        self.restart, self.recovery, self.env, self.checkpoints = restart, recovery, env, checkpoints

    def first(self) -> tuple[int, Pending | None]:
        """The first attempt of this alertd exec: 1, unless an earlier one SIGKILLed left a recovery under way
        (the attempt it planned, once; or the one after the attempt that ran)."""
        recovery = self.recovery
        if recovery is None:
            return 1, None
        pending = recovery.take_pending()
        if pending is not None:
            return _plan_env(self.env, pending), pending
        if recovery.attempt > 1:
            _resume_env(self.env, recovery.last_ledger())
            return recovery.attempt + 1, None
        return 1, None

    async def after(self, end: AttemptEnd, attempt: int) -> tuple[int, Pending | None] | None:
        """The attempt to start after `attempt` ended as `end` says, once its backoff passed; None: none."""
        service, recovery = self.service, self.recovery
        pending = recovery.take_pending() if recovery is not None else None
        if pending is not None:
            plan = pending.plan
            service.engine.runs.recovering("exec", self.run, plan.attempt, plan.describe())
            at = service.clock.now() + pending.backoff
            decision = Decision(True, "stopped", f"recover: {plan.describe()}", plan.attempt, at)
            if await _backoff(service, self.sup, self.woken, decision, self.run, end.status) is None:
                return None
            return _plan_env(self.env, pending), pending
        if self.restart is None or (recovery is not None and recovery.gave_up):
            return None
        decision = self.restart.decide(end, attempt, service.clock.now())
        nxt = await _backoff(service, self.sup, self.woken, decision, self.run, end.status)
        if nxt is None:
            return None
        _resume_env(self.env, self.checkpoints)
        return nxt, None


async def _backoff(
    service: Service, sup: _Supervision, woken: asyncio.Event, decision: Decision, run: str, status: int
) -> int | None:
    """The next attempt once the policy's backoff has passed; None when there is none (it said no, or a signal
    came meanwhile)."""
    if not decision.restart:
        if decision.ending != FINISHED:
            level = logging.WARNING if decision.ending in RESTARTABLE else logging.INFO
            why = decision.why
            log.log(level, "alertd exec: run %s %s (status %d): not restarted: %s", run, decision.ending, status, why)
        return None
    delay = max(0.0, (decision.at or 0.0) - service.clock.now())
    log.warning(
        "alertd exec: run %s %s (status %d): %s, attempt %d in %s",
        run,
        decision.ending,
        status,
        decision.why,
        decision.attempt,
        format_duration(round(delay, 3)),
    )
    woken.clear()
    if sup.signalled is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), delay)
    if sup.signalled is not None:
        log.info("alertd exec: %s during the backoff: run %s not restarted", sup.signalled.name, run)
        return None
    return decision.attempt


async def _watch_ranks(service: Service, child: ChildRun, pid: int) -> None:
    """While the child runs, look every `RANK_SCAN` s for the ranks among its processes (`RANK` in their
    environment, alertd's uid) and tell the run tracker the pids of those it finds (a torchrun launcher's
    workers); nothing for a child with no ranks."""
    loop = asyncio.get_running_loop()
    procfs = Procfs()
    uid = os.getuid()
    known: dict[str, int] = {}
    while True:
        try:
            ranks = await loop.run_in_executor(None, procfs.rank_processes, pid, uid)
        except OSError as exc:
            log.debug("alertd exec: can't look for the child's ranks: %s", exc)
            ranks = {}
        if ranks and any(known.get(rank) != p for rank, p in ranks.items()):
            known |= ranks
            log.info(
                "alertd exec: ranks of run %s: %s",
                child.run,
                ", ".join(f"{r} (pid {p})" for r, p in sorted(known.items(), key=lambda kv: int(kv[0]))),
            )
            service.engine.runs.rank_pids(child.source, child.run, ranks, service.clock.now())
        await asyncio.sleep(RANK_SCAN)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits any more
        loop.call_soon_threadsafe(fn)


def _nth(attempt: int, restart: RestartPolicy | None) -> str:
    return f", attempt {attempt} of {restart.max_restarts + 1} at most" if restart is not None else ""


def _action_reports(service: Service) -> list[ActionReport]:
    """The reports of the actions that acted (not refused) from now on: alertd stopped its child."""
    acted: list[ActionReport] = []
    announce = service.receivers.report

    async def report(r: ActionReport) -> None:
        if not r.refused:
            acted.append(r)
        if announce is not None:
            await announce(r)

    service.receivers.report = report
    return acted


def _stop_asked(service: Service, source: str, run: str) -> bool:
    """The child's callbacks honoured a stop request (`run.stopped`) before it ended."""
    r = service.engine.runs.runs.get((source, run))
    return r is not None and r.stop_requested


def _resume_env(env: dict[str, str], checkpoints: str | None) -> None:
    """Point the next attempt at the newest good checkpoint of the ledger in `checkpoints` (`ALERTD_RESUME_FROM`)."""
    if checkpoints is None:
        return
    entry = last_good(checkpoints)
    if entry is None:
        log.warning("alertd exec: no good checkpoint in the ledger of %s: the next attempt starts afresh", checkpoints)
        env.pop(RESUME_ENV, None)
        return
    env[RESUME_ENV] = str(entry["path"])
    log.warning("alertd exec: the next attempt resumes from %s (step %s)", entry["path"], entry.get("step"))


def _recovery(
    service: Service, run: str, sup: _Supervision, checkpoints: str | None, stop_file: str | None, env: dict[str, str]
) -> ExecRecovery:
    """The supervisor of the `recover` notifiers, its record in the state directory."""

    recovery = ExecRecovery(
        run,
        lambda: sup.child,
        service.commit_record,
        service.state.record,
        checkpoints=checkpoints,
        stop_file=stop_file,
        run_info=env.get(RUN_INFO_ENV),
    )
    service.recovery = recovery
    return recovery


def _plan_env(env: dict[str, str], pending: Pending) -> int:
    """The next attempt's environment as `pending`'s plan says; its attempt."""
    env[PLAN_ENV] = os.path.join(pending.ledger_dir, PLAN_NAME)
    env[RESUME_ENV] = pending.plan.checkpoint
    env[CHECKPOINTS_ENV] = pending.ledger_dir
    return pending.plan.attempt


def _earlier_run_ended(service: Service, source: str, run: str) -> None:
    """A run of this name ran before this alertd started, and its end was not seen (alertd exec starts a new one):
    the alerts restored for it are over. Nothing when none is active."""
    labels = {("source", source), ("run", run)}
    if any(labels <= set(key.labels) for _, key in service.engine.state.active_pairs()):
        now = service.clock.now()
        service.evaluate_with(service.engine.runs.ended_unseen(source, run, now), now)


def _forward_signals(sup: _Supervision) -> None:
    """Take SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 (blocked everywhere else) and pass them on to the
    child, once: not a signal the terminal sent to the whole foreground process group (Ctrl-C), nor a
    SIGUSR1/SIGUSR2 from one of alertd's own ancestors, which signals the whole job (Slurm's scancel
    --signal=USR1 --full from slurmstepd, a shell's kill of the process group): the child has it already.
    Each is a stop asked from outside: the attempt it came in is not restarted (nor is one waiting to start)."""
    procfs = Procfs()
    while True:
        info = signal.sigwaitinfo(EXEC_SIGNALS)
        sig = signal.Signals(info.si_signo)
        child = sup.child
        sup.signalled = sig
        sup.wake()
        if info.si_code == _SI_KERNEL:
            continue  # from the terminal, to the whole foreground process group: the child has it too
        if sig in JOB_SIGNALS and info.si_pid in procfs.ancestors(os.getpid()):
            log.info("alertd exec: %s from pid %d, which signals the whole job: not forwarded", sig.name, info.si_pid)
            continue
        if child is None:
            log.info("alertd exec: %s with no child running: no restart", sig.name)
            continue
        log.info("alertd exec: forwarding %s to pid %s", sig.name, child.pid)
        child.send(sig)


def _run_name(argv: Sequence[str]) -> str:
    """The `run` label of a child: its script (`python train.py` -> train.py) or its command's name."""
    names = [os.path.basename(a) for a in argv[:3] if not a.startswith("-")]
    if len(names) > 1 and names[0].startswith("python"):
        return names[1]
    return names[0] if names else "exec"
