"""The trainer as alertd's own child (`alertd exec -- COMMAND ...`): output passed through and read.

- The child's stdout and stderr are pipes to a small copy process (`alertd.service.childtee.TEE`), which copies
  them to alertd's own stdout and stderr unchanged, byte for byte, as they arrive, and feeds a copy to
  alertd: the child prints at the speed of a plain pipe whatever alertd's parsing costs (what waits for
  the parsing is bounded; lines naming a NaN, an Inf or a crash are never dropped), and its output goes on
  if alertd dies. Two threads here split the fed bytes into lines (`LineSplitter`, progress bars included)
  and parse them as a text log (`LogStream`): `step=10 loss=nan` lines and HF's printed `{'loss': nan, ...}`
  dicts become samples, fatal lines (a Python traceback, CUDA out of memory, an NCCL timeout) events; a torchrun
  launcher's error summary names the rank that failed first, and its own log lines are not parsed as the trainer's
  (`alertd.sources.textlog.torchrun`). The trainer's last lines that look like a collective's watchdog, its flight
  recorder or a process group's timeout (`CollectiveLines`) are kept for the `stacks` action's report.
- The child is started through `alertd.service.childtee.WRAP`, which asks the kernel for SIGINT when alertd dies
  (the polite stop) and then becomes the command, same pid: stdin is alertd's; its signal mask is empty
  and SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ, SIGUSR1 and SIGUSR2 have their default dispositions,
  whatever alertd blocks or ignores. `PYTHONUNBUFFERED=1` is set unless the environment says otherwise, so
  a Python trainer's prints reach alertd when printed, not when a pipe buffer fills.
- `wait()` reaps it and returns its status as subprocess does: the exit code, or -N for signal N; then it
  reads what the child printed last, until the copy ends or nothing more comes for `QUIET` seconds (a
  background grandchild that keeps the output open does not keep alertd waiting: the copy goes on without
  alertd).

Nothing here knows the service: samples go to `on_samples` from the reader threads.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from alertd.model import Sample
from alertd.runs.procfs import Procfs
from alertd.service.childtee import TEE, WRAP, read_frames
from alertd.sources.linetail import LineSplitter
from alertd.sources.textlog import LineParser, LogStream
from alertd.sources.textlog.torchrun import FirstFailure

log = logging.getLogger(__name__)

READ = 65536
QUIET = 0.5
"""Seconds without output after the child exited before alertd stops reading (the copy goes on)."""
DRAIN_MAX = 60.0
"""Seconds alertd reads the child's last output at most after it exited, while more keeps coming: the output it was
behind on (the copy keeps up to `childtee.LIMIT` of it: seconds of parsing, where a NaN printed last may wait), or
a grandchild that keeps printing (the copy goes on without alertd after this)."""
_DEFAULT_SIGNALS = {
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGUSR1,
    signal.SIGUSR2,
}
_PYTHON = [sys.executable, "-I", "-S", "-c"]

COLLECTIVE_LINES = 50
"""Lines `CollectiveLines` keeps (the newest)."""
COLLECTIVE_CHARS = 500
"""Characters kept of each such line (a longer one is cut, ending in `…`)."""
_COLLECTIVE_ANY = (
    "ProcessGroupNCCL",  # [rank0]:[E ProcessGroupNCCL.cpp:616] ..., ProcessGroupNCCL's watchdog got stuck ...
    "ProcessGroupGloo",  # ProcessGroupGloo::allreduce: ..., [E ProcessGroupGloo.cpp:...]
    "ProcessGroupWrapper",
    "Watchdog caught collective operation timeout",
    "TORCH_NCCL",  # TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT ...
    "flight recorder",
    "Flight Recorder",  # Finished writing Flight Recorder debug info to ...
    "FlightRecorder",
    "[c10d]",  # [c10d] The client socket has timed out after ...
    "c10d::",  # c10d::DistBackendError
    "/c10d/",  # [/pytorch/torch/csrc/distributed/c10d/...cpp:N] in an exception's text
    "DistBackendError",
    "monitoredBarrier",  # Rank 1 failed to pass monitoredBarrier in 1000 ms
    "NCCL WARN",
)
"""A line holding any of these is kept."""
_TIMEOUT = ("timeout", "Timeout", "timed out", "Timed out")
_TIMED_OUT_WHERE = ("gloo", "nccl", "collective", "barrier", "process group", "operation to complete", "rank")
"""Where `Timed out` is a collective's (lower case): Gloo's `Timed out waiting 1800000ms for recv operation to
complete`, `Timed out initializing process group in store based barrier ...`."""


def collective_line(line: str) -> bool:
    """Whether `line` looks like a collective's watchdog, its flight recorder or a process group's timeout (PyTorch's
    NCCL and Gloo process groups, NCCL's own warnings). Plain substring tests: linear in the line."""
    if any(marker in line for marker in _COLLECTIVE_ANY):
        return True
    pg = line.find("[PG ")  # [PG 0 (default_pg) Rank 0] Exception (either an error or timeout) detected by watchdog
    if pg >= 0 and line.find("Rank ", pg) >= 0:
        return True
    if "NCCL" in line and any(t in line for t in _TIMEOUT):  # NCCL INFO ... timeout, as the nccl_timeout event
        return True
    if "Timed out" in line:
        low = line.lower()
        return any(where in low for where in _TIMED_OUT_WHERE)
    return False


class CollectiveLines:
    """The last `size` output lines that `collective_line` takes, each cut to `chars` characters; thread-safe."""

    def __init__(self, size: int = COLLECTIVE_LINES, chars: int = COLLECTIVE_CHARS) -> None:
        self.chars = chars
        self._lines: deque[str] = deque(maxlen=size)
        self._lock = threading.Lock()

    def feed(self, lines: Iterable[str]) -> None:
        found = [
            (line if len(line) <= self.chars else line[: self.chars - 1] + "…")
            for line in (raw.rstrip() for raw in lines)
            if collective_line(line)
        ]
        if found:
            with self._lock:
                self._lines.extend(found)

    def lines(self) -> list[str]:
        """A copy, oldest first."""
        with self._lock:
            return list(self._lines)


class ChildRun:
    """One child process, its output copied and parsed. Labels: `source`, `run`, `host`, `pid` (and `labels`)."""

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
        labels: dict[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.labels = dict(labels or {})
        """Labels of its output's samples beside `source`, `run`, `host` and `pid` (alertd exec's `attempt`)."""
        self.run = run
        self.source = source
        self.on_samples = on_samples
        self.parser = parser or LineParser()
        self.env = dict(env or {})
        """Set in the child's environment over alertd's own."""
        self.pid: int | None = None
        self.tee_pid: int | None = None
        self.start_ticks: int | None = None
        self.status: int | None = None
        self.dropped: dict[str, int] = {}
        """Bytes of each stream the copy dropped before alertd parsed them (it printed faster than alertd
        parses; lines naming a NaN, an Inf or a crash were still parsed)."""
        self._out = (stdout_fd, stderr_fd)
        self._readers: list[threading.Thread] = []
        self._notes_reader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._exited_at: float | None = None
        self.stream: LogStream | None = None
        self.failure = FirstFailure()
        """The rank a torchrun launcher says failed first, from its output (`failure.rank`)."""
        self._collective = CollectiveLines()

    def start(self) -> int:
        """Start the copy and the child; return the child's pid. Raises OSError (FileNotFoundError: no such
        command)."""
        env = {**os.environ, **self.env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        _check_command(self.argv[0], env.get("PATH", os.defpath))
        pipes = [os.pipe() for _ in range(4)]  # child stdout, child stderr -> the copy; its feed, its notes
        (out_r, out_w), (err_r, err_w), (feed_r, feed_w), (notes_r, notes_w) = pipes
        try:
            copy_fds = [
                (out_r, 0),
                (self._out[0], 1),
                (self._out[1], 2),
                (err_r, 3),
                (feed_w, 4),
                (notes_w, 6),
            ]
            copy = fd_actions(copy_fds)
            self.tee_pid = os.posix_spawn(sys.executable, [*_PYTHON, TEE], os.environ, file_actions=copy)
            child_fds = [(out_w, 1), (err_w, 2)]
            pid = os.posix_spawn(
                sys.executable,
                [*_PYTHON, WRAP, str(os.getpid()), *self.argv],
                env,
                file_actions=fd_actions(child_fds),
                setsigmask=(),
                setsigdef=_DEFAULT_SIGNALS,
            )
        finally:
            for fd in (out_r, out_w, err_r, err_w, feed_w, notes_w):
                os.close(fd)
        self.pid = pid
        info = Procfs().read(pid)
        self.start_ticks = info.start_ticks if info is not None else None
        labels = {**self.labels, "source": self.source, "run": self.run, "host": socket.gethostname(), "pid": str(pid)}
        self.stream = LogStream(f"the output of {self.argv[0]} (pid {pid})", labels)
        reader = threading.Thread(target=self._read, args=(feed_r,), name="exec-output", daemon=True)
        reader.start()
        self._readers.append(reader)
        notes = threading.Thread(target=self._notes, args=(notes_r,), name="exec-notes", daemon=True)
        notes.start()
        self._notes_reader = notes
        return pid

    def wait(self) -> int:
        """Block until the child exits and its last output is read; its status (-N: killed by signal N)."""
        assert self.pid is not None
        while True:
            try:
                _, raw = os.waitpid(self.pid, 0)
                break
            except InterruptedError:
                continue
        self.status = os.waitstatus_to_exitcode(raw)
        self._exited_at = time.monotonic()
        for t in self._readers:
            t.join(timeout=DRAIN_MAX + 1.0)
        if self._notes_reader is not None:  # the copy's last notes; it may live on (a grandchild's output)
            self._notes_reader.join(timeout=0.2)
        self._reap_copy()
        for name, count in self.dropped.items():
            log.warning(
                "exec: %d bytes of the child's %s were not parsed: it printed faster than alertd parses "
                "(all of it was copied; lines naming a NaN, an Inf or a crash were parsed)",
                count,
                name,
            )
        return self.status

    def collective_lines(self) -> list[str]:
        """The trainer's last output lines that look like a collective's watchdog, its flight recorder or a process
        group's timeout (at most `COLLECTIVE_LINES`, each at most `COLLECTIVE_CHARS` characters), oldest first."""
        return self._collective.lines()

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

    def _read(self, src: int) -> None:
        """Parse what the copy feeds (both streams, in the order the copy read them) until it ends, or, once
        the child exited, nothing comes for QUIET s (a grandchild's output goes on without us)."""
        splitters = {1: LineSplitter(bars=True), 2: LineSplitter(bars=True)}
        pending = {1: b"", 2: b""}
        buf = bytearray()
        poller = select.poll()
        poller.register(src, select.POLLIN)
        last = time.monotonic()
        try:
            while True:
                exited = self._exited_at
                now = time.monotonic()
                if exited is not None and (now - last >= QUIET or now - exited >= DRAIN_MAX):
                    break
                if not poller.poll(100 if exited is None else 50):
                    continue
                try:
                    data = os.read(src, READ)
                except InterruptedError:
                    continue
                if not data:
                    break
                last = time.monotonic()
                buf += data
                lines: list[str] = []
                for stream, chunk in read_frames(buf):
                    if stream not in pending:
                        continue
                    pending[stream] += chunk
                    pending[stream] = pending[stream][splitters[stream].split(pending[stream], lines, final=False) :]
                self._parse(lines)
            lines = []
            for stream, splitter in splitters.items():
                splitter.split(pending[stream], lines, final=True)
            self._parse(lines)
        except Exception:  # the parsing must never take the child down with it
            log.exception("exec: reading the child's output failed")
        finally:
            os.close(src)

    def _notes(self, src: int) -> None:
        """What the copy tells: `dropped <stream> <bytes>` (the total so far)."""
        try:
            with os.fdopen(src, "rb", buffering=0) as f:
                buf = b""
                while True:
                    data = f.read(4096)
                    if not data:
                        return
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        parts = line.split()
                        if len(parts) == 3 and parts[0] == b"dropped" and parts[2].isdigit():
                            name = parts[1].decode("ascii", "replace")
                            if name not in self.dropped:
                                log.warning(
                                    "exec: the child prints faster than alertd parses its %s: some of it is "
                                    "copied but not parsed (lines naming a NaN, an Inf or a crash still are)",
                                    name,
                                )
                            self.dropped[name] = int(parts[2])
        except Exception:
            log.exception("exec: reading the copy's notes failed")

    def _parse(self, lines: list[str]) -> None:
        if not lines or self.stream is None:
            return
        samples: list[Sample] = []
        with self._lock:
            trainer = self.failure.feed(lines)
            self._collective.feed(trainer)
            self.stream.parse(self.parser, trainer, time.time(), samples)
        if samples:
            self.on_samples(samples)

    def _reap_copy(self) -> None:
        """Reap the copy if it has ended (it goes on while a grandchild holds the output: not waited for)."""
        if self.tee_pid is None:
            return
        try:
            pid, _ = os.waitpid(self.tee_pid, os.WNOHANG)
        except ChildProcessError:
            pid = self.tee_pid
        if pid:
            self.tee_pid = None


def fd_actions(pairs: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """posix_spawn file actions putting each fd at its target number: every source is first moved above the
    targets (so no dup2 overwrites a source still to be used), then duplicated into place."""
    high = max(max(a, b) for a, b in pairs) + 1
    actions: list[tuple[int, ...]] = []
    for i, (src, _) in enumerate(pairs):
        actions.append((os.POSIX_SPAWN_DUP2, src, high + i))
    for i, (_, dst) in enumerate(pairs):
        actions.append((os.POSIX_SPAWN_DUP2, high + i, dst))
    for i in range(len(pairs)):
        actions.append((os.POSIX_SPAWN_CLOSE, high + i))
    return actions


def _check_command(command: str, path: str) -> None:
    """FileNotFoundError / PermissionError, as posix_spawnp would raise, for a command that can't be run."""
    if os.sep in command:
        if not os.path.exists(command):
            raise FileNotFoundError(2, "No such file or directory", command)
        if not os.access(command, os.X_OK) or os.path.isdir(command):
            raise PermissionError(13, "Permission denied", command)
        return
    if shutil.which(command, path=path) is None:
        raise FileNotFoundError(2, "No such file or directory", command)
