"""The trainer as alertd's own child (`alertd exec -- COMMAND ...`): output passed through and read.

- The child is started with `posix_spawnp`: stdin is alertd's, stdout and stderr are pipes that two
  threads copy to alertd's own stdout and stderr unchanged, byte for byte, as they arrive; the same
  bytes are split into lines (`LineSplitter`, progress bars included) and parsed as a text log
  (`LogStream`): `step=10 loss=nan` lines and HF's printed `{'loss': nan, ...}` dicts become samples,
  fatal lines (a Python traceback, CUDA out of memory, an NCCL timeout) events.
- Its signal mask and the dispositions of SIGINT, SIGTERM, SIGHUP, SIGPIPE and SIGXFSZ are the
  defaults, whatever alertd blocks or ignores. `PYTHONUNBUFFERED=1` is set unless the environment
  says otherwise, so a Python trainer's prints reach alertd when printed, not when a pipe buffer fills.
- `wait()` reaps it and returns its status as subprocess does: the exit code, or -N for signal N.

Nothing here knows the service: samples go to `on_samples` from the reader threads.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence

from alertd.model import Sample
from alertd.procfs import Procfs
from alertd.sources.linetail import LineSplitter
from alertd.sources.textlog import LineParser, LogStream

log = logging.getLogger(__name__)

READ = 65536
_DEFAULT_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ}


class ChildRun:
    """One child process, its output copied and parsed. Labels: `source`, `run`, `host`, `pid`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        run: str,
        source: str = "exec",
        on_samples: Callable[[list[Sample]], None],
        parser: LineParser | None = None,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env or {})
        """Set in the child's environment over alertd's own."""
        self.run = run
        self.source = source
        self.on_samples = on_samples
        self.parser = parser or LineParser()
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.status: int | None = None
        self._out = (stdout_fd, stderr_fd)
        self._pumps: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.stream: LogStream | None = None

    def start(self) -> int:
        """Start the child; return its pid. Raises OSError (FileNotFoundError: no such command)."""
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        env = {**os.environ, **self.env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        actions = [(os.POSIX_SPAWN_DUP2, w_out, 1), (os.POSIX_SPAWN_DUP2, w_err, 2)]
        try:
            pid = os.posix_spawnp(
                self.argv[0], self.argv, env, file_actions=actions, setsigmask=(), setsigdef=_DEFAULT_SIGNALS
            )
        except OSError:
            for fd in (r_out, w_out, r_err, w_err):
                os.close(fd)
            raise
        os.close(w_out)
        os.close(w_err)
        self.pid = pid
        info = Procfs().read(pid)
        self.start_ticks = info.start_ticks if info is not None else None
        labels = {"source": self.source, "run": self.run, "host": socket.gethostname(), "pid": str(pid)}
        self.stream = LogStream(f"the output of {self.argv[0]} (pid {pid})", labels)
        for src, dst, name in ((r_out, self._out[0], "stdout"), (r_err, self._out[1], "stderr")):
            t = threading.Thread(target=self._pump, args=(src, dst), name=f"exec-{name}", daemon=True)
            t.start()
            self._pumps.append(t)
        return pid

    def wait(self) -> int:
        """Block until the child exits and its output is copied; its status (-N: killed by signal N)."""
        assert self.pid is not None
        while True:
            try:
                _, raw = os.waitpid(self.pid, 0)
                break
            except InterruptedError:
                continue
        self.status = os.waitstatus_to_exitcode(raw)
        for t in self._pumps:
            t.join(timeout=10)  # a grandchild may hold the pipes open: don't wait for it forever
        return self.status

    def identity(self) -> tuple[int, int] | None:
        """(pid, start time in clock ticks) while the child runs: what a `kill` with `target: child` pins."""
        if self.pid is None or self.start_ticks is None or self.status is not None:
            return None
        return self.pid, self.start_ticks

    def send(self, sig: int) -> bool:
        """Send `sig` to the child if it has not been reaped; False when it is gone."""
        if self.pid is None or self.status is not None:
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    # output

    def _pump(self, src: int, dst: int) -> None:
        splitter = LineSplitter(bars=True)
        pending = b""
        writable = True
        try:
            while True:
                try:
                    data = os.read(src, READ)
                except InterruptedError:
                    continue
                if not data:
                    break
                if writable:
                    writable = _write_all(dst, data)
                pending += data
                lines: list[str] = []
                pending = pending[splitter.split(pending, lines, final=False) :]
                self._parse(lines)
            lines = []
            splitter.split(pending, lines, final=True)
            self._parse(lines)
        except Exception:  # the copy must never take the child down with it
            log.exception("exec: reading the child's output failed")
        finally:
            os.close(src)

    def _parse(self, lines: list[str]) -> None:
        if not lines or self.stream is None:
            return
        samples: list[Sample] = []
        with self._lock:
            self.stream.parse(self.parser, lines, time.time(), samples)
        if samples:
            self.on_samples(samples)


def _write_all(fd: int, data: bytes) -> bool:
    """Write everything; False once the reader went away (the child's output is still read)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                return False
            raise
        view = view[n:]
    return True
