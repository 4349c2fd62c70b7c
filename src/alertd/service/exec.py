"""`alertd exec -- COMMAND ...`: the trainer as alertd's own child, watched and supervised; alertd exits with
its status. The child and its output: `alertd.service.child`; the stop the built-in rules add:
`alertd.service.exec_stop`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from alertd.dispatch.outbox import STATE_DIR_ENV, StateDirError, StateDirLocked
from alertd.errors import ConfigError
from alertd.logs import setup_logging
from alertd.model import Sample
from alertd.runs.procfs import Procfs
from alertd.service.child import ChildRun
from alertd.service.engine import log
from alertd.service.exec_stop import with_exec_stop
from alertd.service.main import serve, token_problem
from alertd.service.service import Service

EXEC_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals `alertd exec` takes for its child: forwarded (see `_forward_signals`), never its own end."""
JOB_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""Signals a job's supervisor sends to every process of the job (Slurm's `scancel --signal=USR1 --full`): one
from an ancestor of alertd reached the child too, and is not sent to it twice."""
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
    (`alertd.service.exec_stop`; the built-in rules without `--no-stop`).
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
            stop_file = own if os.path.isabs(own) else str((directory / STOP_FILE_NAME).absolute())
        amend = (lambda config, path=stop_file: with_exec_stop(config, path)) if stop_file else None
        try:
            service = Service(paths, console=sys.stderr, exec_mode=True, state=directory, amend=amend)
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
    env = {}
    if stop_file is not None and stop_file != own:
        env[STOP_FILE_ENV] = stop_file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stop_file)  # an earlier child's request it never honoured (a script without the callbacks)
    # Block the signals before any thread exists, so that only the forwarding thread takes them.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, EXEC_SIGNALS)
    try:
        status = asyncio.run(_exec_main(service, list(argv), name, listen, env))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if status is None:
        return 127
    return 128 - status if status < 0 else status


STOP_FILE_NAME = "ALERTD_STOP"
STOP_FILE_ENV = "ALERTD_STOP_FILE"
"""The stop file alertd's training callbacks look for (`alertd.integrations.stop`)."""
EXEC_STATE_DIRS = 9
"""State directories `alertd exec` tries per run name: `<run>`, then `<run>.2` ... `<run>.9`."""


def _exec_state_dirs(run: str) -> list[Path]:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:100].lstrip(".") or "run"
    base = Path(".state") / "exec"
    return [base / safe, *(base / f"{safe}.{n}" for n in range(2, EXEC_STATE_DIRS + 1))]


async def _exec_main(
    service: Service, argv: list[str], run: str, listen: str | None, env: dict[str, str] | None = None
) -> int | None:
    loop = asyncio.get_running_loop()
    main = asyncio.create_task(serve(service, listen, handle_signals=False))
    while not service.ready:
        if main.done():
            await main
            return None
        await asyncio.sleep(0.01)

    def deliver(samples: list[Sample]) -> None:
        loop.call_soon_threadsafe(lambda: service.ingest(samples, service.clock.now()))

    child = ChildRun(argv, run=run, on_samples=deliver, env=env)
    _earlier_run_ended(service, child.source, run)  # restored alerts of an earlier child: that run is over
    try:
        pid = child.start()
    except OSError as exc:
        log.error("alertd exec: can't start %s: %s", argv[0], exc.strerror or exc)
        service.stop()
        await main
        return None
    service.child = child
    log.info("alertd exec: started %s (pid %d) as run %s", argv[0], pid, run)
    threading.Thread(target=_forward_signals, args=(child,), name="exec-signals", daemon=True).start()
    status = await loop.run_in_executor(None, child.wait)
    log.info("alertd exec: %s (pid %d) exited with status %d", argv[0], pid, status)
    now = service.clock.now()
    service.evaluate_with(service.engine.runs.exited(child.source, run, status, now), now)  # its end, at once
    receivers = list(service.notifiers.values())
    await service.deliveries.drain(receivers, EXEC_DRAIN)  # the actions under way report how the child ended
    try:
        service.deliveries.flush_groups()  # alertd ends with its child: what waits in a group is told now
    except sqlite3.Error as exc:
        service.state_failed(exc)
    await service.deliveries.drain(receivers, EXEC_DRAIN)
    service.stop()
    await main
    return status


def _earlier_run_ended(service: Service, source: str, run: str) -> None:
    """A run of this name ran before this alertd started, and its end was not seen (alertd exec starts a new one):
    the alerts restored for it are over. Nothing when none is active."""
    labels = {("source", source), ("run", run)}
    if any(labels <= set(key.labels) for _, key in service.engine.state.active_pairs()):
        now = service.clock.now()
        service.evaluate_with(service.engine.runs.ended_unseen(source, run, now), now)


def _forward_signals(child: ChildRun) -> None:
    """Take SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 (blocked everywhere else) and pass them on to the
    child, once: not a signal the terminal sent to the whole foreground process group (Ctrl-C), nor a
    SIGUSR1/SIGUSR2 from one of alertd's own ancestors, which signals the whole job (Slurm's scancel
    --signal=USR1 --full from slurmstepd, a shell's kill of the process group): the child has it already."""
    procfs = Procfs()
    while child.status is None:
        info = signal.sigwaitinfo(EXEC_SIGNALS)
        sig = signal.Signals(info.si_signo)
        if info.si_code == _SI_KERNEL:
            continue  # from the terminal, to the whole foreground process group: the child has it too
        if sig in JOB_SIGNALS and info.si_pid in procfs.ancestors(os.getpid()):
            log.info("alertd exec: %s from pid %d, which signals the whole job: not forwarded", sig.name, info.si_pid)
            continue
        log.info("alertd exec: forwarding %s to pid %s", sig.name, child.pid)
        child.send(sig)


def _run_name(argv: Sequence[str]) -> str:
    """The `run` label of a child: its script (`python train.py` -> train.py) or its command's name."""
    names = [os.path.basename(a) for a in argv[:3] if not a.startswith("-")]
    if len(names) > 1 and names[0].startswith("python"):
        return names[1]
    return names[0] if names else "exec"
