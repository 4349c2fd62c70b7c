"""Helpers of the kill tests: child processes, alerts, forced pid reuse."""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alertd.model import Notification, Transition, TransitionKind, make_labels

HERE = Path(__file__).parent
PYTHON = sys.executable


class Spawner:
    """Starts children (Python scripts of this directory, or any argv) and tracks them for cleanup."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.children: list[subprocess.Popen[bytes]] = []
        self._n = 0

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Start `argv` as a child process."""
        p = subprocess.Popen(argv, **kw)
        self.children.append(p)
        return p

    def script(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start `name` from this directory and wait for its READY file; return it and its work dir."""
        self._n += 1
        work = self.tmp / f"{name}-{self._n}"
        work.mkdir()
        ready = work / "READY"
        if name == "trainer_script.py":
            argv = [str(work / "logs"), str(work / "checkpoint.json"), str(ready)]
            (work / "logs").mkdir()
        else:
            argv = [str(work / "signals.log"), str(ready)]
        p = self.popen([PYTHON, str(HERE / name), *argv, *args])
        wait_for(ready.exists, f"{name} (pid {p.pid}) to get ready", proc=p)
        return p, work

    def cleanup(self) -> None:
        """Kill and reap every child that is still there."""
        for p in self.children:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
            with contextlib.suppress(Exception):
                p.wait(timeout=5)


def wait_for(cond: Any, what: str, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll `cond()` until true; fail naming `what` (and the child's exit) when it never is."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"waiting for {what}: the child exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def signals_received(work: Path) -> list[str]:
    """The signal names a stubborn child noted."""
    log = work / "signals.log"
    return log.read_text().split() if log.exists() else []


def proc_state(pid: int) -> str | None:
    """The one-letter state of `pid` from the real /proc, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(")") + 2]


def firing(
    labels: dict[str, str],
    *,
    rule: str = "loss_not_finite",
    active_at: float | None = None,
    state: TransitionKind = TransitionKind.FIRING,
    value: float = math.nan,
    step: int | None = 120,
) -> Transition:
    """A transition of `rule` on `labels`, active since `active_at` (default: now)."""
    now = time.time()
    return Transition(
        rule=rule,
        state=state,
        time=now,
        step=step,
        value=value,
        labels=make_labels(labels),
        severity="critical",
        annotations=(("summary", "loss is NaN"),),
        active_at=now if active_at is None else active_at,
    )


def notification(*alerts: Transition) -> Notification:
    """A notification carrying `alerts` to the receiver `stop`."""
    status = "firing" if any(a.state is TransitionKind.FIRING for a in alerts) else "resolved"
    return Notification(
        receiver="stop",
        group_key="g",
        group_labels=(),
        status=status,
        alerts=alerts,
        key=f"g:{status}",
        created=time.time(),
    )


def spawn_with_pid(
    spawner: Spawner, pid: int, argv: list[str], tries: int = 30, **kw: Any
) -> subprocess.Popen[bytes] | None:
    """Start `argv` (Popen keywords `kw`) with exactly `pid` through /proc/sys/kernel/ns_last_pid (needs
    privilege).

    Returns None where the kernel won't let us choose the next pid (not root, no CAP_CHECKPOINT_RESTORE),
    or when another process keeps taking it.
    """
    for _ in range(tries):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        p = spawner.popen(argv, **kw)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def own_pid_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    return proc_state(pid) not in (None, "Z", "X")


def tb_child(
    spawner: Spawner, logdir: Path, mode: str, host: str | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start tb_writer_child.py writing into `logdir` (see its docstring for `mode`); return it and its READY.

    READY holds the path of the event file once a NaN is on disk.
    """
    spawner._n += 1
    ready = spawner.tmp / f"tbchild-{spawner._n}.ready"
    argv = [PYTHON, str(HERE / "tb_writer_child.py"), str(logdir), str(ready), mode, *([host] if host else [])]
    p = spawner.popen(argv)
    wait_for(ready.exists, f"tb_writer_child {mode} (pid {p.pid}) to write its NaN", proc=p)
    return p, ready


def tb_source(logdir: Path, name: str = "tb") -> Any:
    """A TensorBoard source over `logdir`, as the service builds it."""
    from alertd.sources.config import TensorBoardConfig
    from alertd.sources.tensorboard import TensorBoardSource

    return TensorBoardSource(
        TensorBoardConfig.model_validate({"name": name, "type": "tensorboard", "logdir": str(logdir)})
    )


def nan_labels(source: Any) -> dict[str, str]:
    """Poll `source` once and return the labels of its (single) NaN sample: what the alert would carry."""
    found = {s.series.labels for s in source.read_new() if math.isnan(s.value)}
    assert len(found) == 1, found
    return dict(next(iter(found)))
