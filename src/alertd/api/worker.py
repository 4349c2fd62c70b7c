"""Each API dry run in a process of its own, killed at its time limit: nothing a request does (a FIFO
named like an event file, a YAML alias bomb, a rule that takes for ever) can hold the service's threads,
its memory or its shutdown.

`DryRuns` (in the service) starts `python -m alertd.api.worker` in a new session for each dry run,
at most `limit` at once (one more is answered 429 with Retry-After), writes the job to its stdin as
JSON and reads the answer from its stdout (at most `max_output` bytes). At the time limit, and when the
service stops, the worker's whole process group gets SIGKILL. The worker itself limits its address space
and CPU time, dies with the service (PR_SET_PDEATHSIG), is confined to the dry-run roots before any
source runs, and sees only a few harmless environment variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import resource
import select
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

MAX_RUNNING = 4
"""Dry runs at once; one more is refused (429), not queued."""
MAX_OUTPUT = 16 << 20
"""Bytes a dry run's answer may have."""
MEMORY = 2 << 30
"""Bytes of address space a worker may map (RLIMIT_AS)."""
SPARE_IDLE = 600.0
"""Seconds the spare worker waits for a job before it leaves."""
STDERR_TAIL = 4000
"""Bytes of a worker's stderr kept to explain how it failed."""
ENV_KEPT = ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SYSTEMROOT")
"""The environment variables a worker sees (and LC_*): no token, no API key, no webhook URL."""


class DryRunFailed(Exception):
    """A dry run that gives no transitions: `status` is the HTTP status, `errors` say why."""

    def __init__(self, status: int, errors: list[str], headers: dict[str, str] | None = None) -> None:
        super().__init__("; ".join(errors))
        self.status, self.errors, self.headers = status, errors, headers


class DryRuns:
    """The dry-run workers of one API: start, bound, kill. One spare worker, its imports done, waits for
    the next job once a dry run has been asked for (it leaves by itself after `SPARE_IDLE` seconds)."""

    def __init__(
        self,
        *,
        timeout: float,
        roots: Sequence[str] = (),
        limit: int = MAX_RUNNING,
        max_output: int = MAX_OUTPUT,
        memory: int = MEMORY,
    ) -> None:
        self.timeout = timeout
        self.roots = [os.path.abspath(r) for r in roots]
        self.limit = limit
        self.max_output = max_output
        self.memory = memory
        self.closed = False
        self._deadlines: dict[object, float] = {}
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._spare: asyncio.subprocess.Process | None = None
        self._spawning: asyncio.Task[None] | None = None
        self._reaping: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> list[int]:
        """The process ids of the workers: running a job, or waiting as the spare."""
        return [*self._procs, *([self._spare.pid] if self._spare else [])]

    async def run(self, job: Mapping[str, Any]) -> bytes:
        """Run one dry run (`rules`, `samples`, `source`, `until`) in a worker; the JSON of its answer."""
        if self.closed:
            raise DryRunFailed(503, ["the service is stopping"])
        loop = asyncio.get_running_loop()
        if len(self._deadlines) >= self.limit:
            retry = str(max(1, math.ceil(min(self._deadlines.values()) - loop.time())))
            raise DryRunFailed(
                429,
                [f"{self.limit} dry runs are running already (the most at once): try again in {retry}s"],
                {"Retry-After": retry},
            )
        token = object()
        deadline = self._deadlines[token] = loop.time() + self.timeout
        payload = json.dumps({**job, "roots": self.roots, "timeout": self.timeout, "memory": self.memory}).encode()
        proc: asyncio.subprocess.Process | None = None
        try:
            async with asyncio.timeout_at(deadline):
                proc = await self._worker()
                self._procs[proc.pid] = proc
                return await self._talk(proc, payload)
        except TimeoutError:
            raise DryRunFailed(504, [f"the dry run took longer than {self.timeout:g}s"]) from None
        finally:
            del self._deadlines[token]
            if proc is not None:
                self._procs.pop(proc.pid, None)
                self._end(proc)

    async def _worker(self) -> asyncio.subprocess.Process:
        """The spare worker if it is still there, else a new one; a new spare is started either way."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.returncode is not None:
            self._end(spare)
            spare = None
        if self._spawning is None and not self.closed:
            self._spawning = asyncio.get_running_loop().create_task(self._new_spare())
        return spare if spare is not None else await _spawn()

    async def _new_spare(self) -> None:
        try:
            proc = await _spawn()
        except OSError:
            return
        finally:
            self._spawning = None
        if self.closed or self._spare is not None:
            self._end(proc)
        else:
            self._spare = proc

    async def _talk(self, proc: asyncio.subprocess.Process, payload: bytes) -> bytes:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(ConnectionError):
            proc.stdin.write(payload)
            await proc.stdin.drain()
            proc.stdin.close()
        stderr = asyncio.ensure_future(_tail(proc.stderr))
        try:
            out = await _read_capped(proc.stdout, self.max_output)
            if out is None:
                raise DryRunFailed(
                    413, [f"the dry run's answer is larger than {self.max_output} bytes: narrow the rules or the data"]
                )
            code = await proc.wait()
            err = await stderr
        finally:
            stderr.cancel()
        head, _, body = out.partition(b"\n")
        try:
            answer = json.loads(head) if code == 0 else None
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("status") == 200:
            return body
        if isinstance(answer, dict) and isinstance(answer.get("errors"), list):
            raise DryRunFailed(int(answer.get("status", 400)), [str(e) for e in answer["errors"]])
        if self.closed:
            raise DryRunFailed(503, ["the service is stopping"])
        raise DryRunFailed(500, [f"the dry run's worker failed ({_exit_text(code)}): {_last_line(err)}"])

    def _end(self, proc: asyncio.subprocess.Process) -> None:
        """Kill the worker's process group unless it has exited; reap it in the background."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            task = asyncio.get_running_loop().create_task(proc.wait())
            self._reaping.add(task)
            task.add_done_callback(self._reaping.discard)

    def close(self) -> None:
        """Refuse new dry runs and kill every worker (the service stops)."""
        self.closed = True
        if self._spawning is not None:
            self._spawning.cancel()
        for pid in self.running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self._spare = None


async def _spawn() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",  # not the working directory first on sys.path: a stray `alertd/` there is never imported
        "-m",
        "alertd.api.worker",
        str(os.getpid()),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=worker_env(os.environ),
    )


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> bytes | None:
    """All of `stream`, or None once it passes `limit` bytes (the rest is not read)."""
    chunks, size = [], 0
    while chunk := await stream.read(1 << 16):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _tail(stream: asyncio.StreamReader) -> bytes:
    tail = b""
    while chunk := await stream.read(1 << 16):
        tail = (tail + chunk)[-STDERR_TAIL:]
    return tail


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _last_line(err: bytes) -> str:
    lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a worker: `ENV_KEPT` and the locale, nothing else."""
    return {k: v for k, v in environ.items() if k in ENV_KEPT or k.startswith("LC_")}


# -- the worker process ----------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG: the service's death kills this worker (even one blocked in open())."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # The service died before the line above.


def _limit_self(timeout: float, memory: int) -> None:
    """CPU time (beyond what the imports took) and address space limits, an alarm at the time limit."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime + timeout) + 1
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    signal.alarm(math.ceil(timeout) + 2)  # SIGALRM's default action ends the process, blocked or not.


def work(job: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Do one dry run in this process: `({"status": 200}, the answer's JSON)` or `({"status": ..., "errors":
    [...]}, b"")`. The answer is what `DryRunOut` makes of it, as the API has always served it.

    Before anything is read this process is confined to the roots: every data file a source opens must
    lie under them once its links are followed (`OutsideRoots` otherwise, answered 403)."""
    from alertd.api.dryrun import DryRunError, DryRunJob, refuse_links_out, resolve_under
    from alertd.api.models import DryRunOut
    from alertd.sources.fileopen import OutsideRoots, confine

    roots = [str(r) for r in job.get("roots") or []]
    confine(roots)
    try:
        source = None
        if job.get("source") is not None:
            kind, path = job["source"]["type"], job["source"]["path"]
            source = (kind, resolve_under(path, roots))
            refuse_links_out(source[1], roots)
        result = DryRunJob(
            job["rules"], job.get("samples") or [], source, job.get("until"), bool(job.get("plot")), roots
        ).run()
        body = DryRunOut.model_validate(result).model_dump_json(exclude_none=True).encode()
        return {"status": 200}, body
    except DryRunError as exc:
        return {"status": exc.status, "errors": exc.errors}, b""
    except OutsideRoots as exc:
        return {"status": 403, "errors": [refusal(exc)]}, b""
    except MemoryError:
        memory = int(job.get("memory", MEMORY)) >> 20
        return {"status": 413, "errors": [f"the dry run needs more than the {memory} MiB of memory it may use"]}, b""
    except RecursionError:
        return {"status": 400, "errors": ["the dry run's input is nested too deeply"]}, b""


def refusal(exc: BaseException) -> str:
    """What a dry run that reached outside the allowed directories answers."""
    where = getattr(exc, "filename", None)
    return "refused: the source reached a file outside the allowed directories" + (
        f" ({os.path.basename(str(where))})" if where else ""
    )


def main() -> int:
    """Wait (as the spare) for a job on stdin, do it, write the answer to stdout: a line of JSON with the
    status (and the errors), then the answer's JSON."""
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
    with contextlib.suppress(OSError):
        os.nice(10)  # the service comes first, while this worker starts as while it works
    import alertd.api.dryrun  # noqa: F401 - the imports take most of a worker's start: done before the job

    if not select.select([sys.stdin.buffer], [], [], SPARE_IDLE)[0]:
        return 0
    job = json.loads(sys.stdin.buffer.read())
    _limit_self(float(job.get("timeout", 10.0)), int(job.get("memory", MEMORY)))
    head, body = work(job)
    out = sys.stdout.buffer
    out.write(json.dumps(head).encode() + b"\n" + body)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
