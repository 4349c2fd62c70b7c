"""Running a short-lived program from the event loop: bounded output, a deadline, its whole group killed.

Shared by the `exec` notifier and the Slurm source and notifier (`squeue`, `scancel`). The program runs in
its own session (process group); at the deadline the group gets SIGTERM, then SIGKILL `grace` seconds
later. Output beyond the cap is read and dropped, so the program never blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXIT_POLL = 0.01
"""Seconds between two looks at whether the program exited."""
DRAIN_WAIT = 1.0
"""Seconds the output pipes are still read after the program exited (a descendant may hold them)."""


@dataclass(frozen=True, slots=True)
class Completed:
    """How a program ended: `returncode` as subprocess's (-N: killed by signal N)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stdout_cut: bool = False
    """More than the cap was written to stdout (what is kept is its beginning)."""


async def run_program(
    argv: Sequence[str],
    *,
    timeout: float,
    max_stdout: int,
    max_stderr: int = 4096,
    env: Mapping[str, str] | None = None,
    grace: float = 2.0,
    data: bytes | None = None,
    started: Callable[[asyncio.subprocess.Process], None] | None = None,
) -> Completed:
    """Run `argv` (never through a shell), `data` on its stdin (none: no input); raise OSError when it
    cannot be started. `started` is told of the process once it runs (to kill it from elsewhere)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL if data is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if started is not None:
        started(proc)
    sizes = [0, 0]
    readers = [
        asyncio.create_task(read_capped(proc.stdout, max_stdout, sizes, 0)),
        asyncio.create_task(read_capped(proc.stderr, max_stderr, sizes, 1)),
    ]
    tasks: list[asyncio.Task[Any]] = list(readers)
    if data is not None:
        assert proc.stdin is not None
        tasks.append(asyncio.create_task(write_all(proc.stdin, data)))
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                await exited(proc)
        except TimeoutError:
            timed_out = True
            killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await exited(proc)
            killpg(proc.pid, signal.SIGKILL)
            await exited(proc)
        await asyncio.wait(readers, timeout=DRAIN_WAIT)
    finally:
        if proc.returncode is None:  # cancelled: nothing of it may stay
            killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        transport = getattr(proc, "_transport", None)
        if proc.returncode is not None and transport is not None:
            transport.close()
    out = readers[0].result() if not readers[0].cancelled() else b""
    err = readers[1].result() if not readers[1].cancelled() else b""
    code = proc.returncode if proc.returncode is not None else -1
    return Completed(code, out, err, timed_out, sizes[0] > max_stdout)


async def exited(proc: asyncio.subprocess.Process) -> None:
    """Wait until the program itself exited. Not `proc.wait()`: on Python 3.11 that also waits until every
    output pipe is closed, which a descendant may keep open long after."""
    while proc.returncode is None:
        await asyncio.sleep(EXIT_POLL)


async def read_capped(stream: asyncio.StreamReader, keep: int, sizes: list[int] | None = None, slot: int = 0) -> bytes:
    """The first `keep` bytes of `stream`; the rest is read and dropped so the program never blocks.
    `sizes[slot]` counts every byte read."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if sizes is not None:
            sizes[slot] += len(chunk)
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]
    return bytes(kept)


async def write_all(stdin: asyncio.StreamWriter, data: bytes) -> None:
    """Write `data` and close stdin; a program that does not read it is not an error.

    Cancelled (the program exited or was killed, and a descendant holds its stdin without reading), what is left
    unwritten is dropped and the pipe closed at once: a graceful close would keep the pipe and the rest of
    `data` until that descendant ends."""
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            await stdin.drain()
    except asyncio.CancelledError:
        stdin.transport.abort()
        raise
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()


def killpg(pgid: int, sig: signal.Signals) -> None:
    """Signal a process group; one that is gone (or not ours) is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_name(number: int) -> str:
    """`SIGKILL` for 9; `signal 77` for a number that names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
