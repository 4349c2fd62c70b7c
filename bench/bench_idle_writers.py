"""Benchmark of an idle service on a logdir of finished runs written on this host, beside TensorBoard's Rust data
server on the same logdir.

    python bench/bench_idle_writers.py

Each run directory holds one small event file named as TensorBoard's writers name theirs on this machine,
`events.out.tfevents.<secs>.<this host>.<pid>.0`, the pid one of a process that has exited (a finished run): so
alertd's writer checks (`alertd.runs.writers`) have a claim to look at for every file. One run is live (its file
held open; it gets no writes during the window). For 5,000 and 10,000 runs, side by side on one copy of the
logdir:

- alertd: `python -m alertd run` with one `tensorboard` source (`interval: 1s`, `watch: notify`) and a NaN rule;
- anchor: the Rust data server (`tensorboard_data_server`, as `tensorboard` runs it: `--reload=5`, its default
  5-second reload), with `--samples-per-plugin scalars=all`.

Once both have read everything (alertd's CPU per second has settled; the server's load cycle is logged) and 25 s
more have passed (two of alertd's housekeepings: the first freezes the start-up objects out of the collector's
passes, `alertd.service.heap`, a one-off full collection), idle is the CPU each uses over 20 s (the scheduler's
run time of all of its threads, /proc/<pid>/task/*/schedstat). The goal (issue "Performance"): alertd under 1 %
of a core at 10,000 runs, whoever wrote the files. Figures only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_watch import FILE_HEAD, Alertd, record, settle

from alertd.testing.receiver import Receiver

RUN_COUNTS = (5_000, 10_000)
WINDOW = 20.0


def dead_pids(n: int) -> list[int]:
    """`n` pids that name no process now (the writers of finished runs)."""
    top = int(Path("/proc/sys/kernel/pid_max").read_text())
    out: list[int] = []
    pid = top - 1
    while len(out) < n and pid > 1000:
        if not os.path.exists(f"/proc/{pid}"):
            out.append(pid)
        pid -= 1
    return out


def make_logdir(logdir: Path, runs: int) -> int:
    """`runs - 1` finished runs named for this host and an exited pid, and a live one held open: its fd."""
    data = FILE_HEAD + record(1.0, 0)
    host = socket.gethostname()
    logdir.mkdir(parents=True)
    now = int(time.time())
    for i, pid in enumerate(dead_pids(runs - 1)):
        run = logdir / f"run{i:05d}"
        run.mkdir()
        (run / f"events.out.tfevents.{now}.{host}.{pid}.0").write_bytes(data)
    live = logdir / "live"
    live.mkdir()
    fd = os.open(live / f"events.out.tfevents.{now}.{host}.{os.getpid()}.0", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, data)
    return fd


def task_cpu(pid: int) -> float:
    """CPU seconds used so far by all of a process's threads."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


def data_server(logdir: Path, log: Path) -> subprocess.Popen[bytes]:
    from tensorboard_data_server import server_binary

    args = [server_binary(), f"--logdir={logdir}", "--reload=5", "--port=0", "--samples-per-plugin=scalars=all"]
    args += ["--die-after-stdin", "--verbose"]
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdin=subprocess.PIPE, stderr=out)


def loaded(log: Path) -> bool:
    return "Finished load cycle" in log.read_text(errors="replace")


def main() -> None:
    receiver = Receiver()
    try:
        with tempfile.TemporaryDirectory(prefix="alertd-idle-") as tmp:
            work = Path(tmp)
            for runs in RUN_COUNTS:
                logdir = work / f"runs{runs}"
                fd = make_logdir(logdir, runs)
                server_log = work / f"server{runs}.log"
                server = data_server(logdir, server_log)
                alertd = Alertd(work, f"idle{runs}", logdir, "notify", receiver.url)
                try:
                    settle(alertd)
                    deadline = time.monotonic() + 120
                    while not loaded(server_log) and time.monotonic() < deadline:
                        time.sleep(0.5)
                    time.sleep(25.0)  # past the server's reloads and two of alertd's housekeepings (the heap freeze)
                    a0, s0, t0 = alertd.cpu(), task_cpu(server.pid), time.monotonic()
                    time.sleep(WINDOW)
                    a1, s1, t1 = alertd.cpu(), task_cpu(server.pid), time.monotonic()
                    mine, theirs = (a1 - a0) / (t1 - t0), (s1 - s0) / (t1 - t0)
                    print(
                        f"idle, {runs} finished runs written on this host (exited pids in the names) + 1 live: "
                        f"alertd {100 * mine:.2f} % of a core, Rust data server (reload 5 s) {100 * theirs:.2f} % "
                        f"({mine / theirs:.1f}x; goal: alertd under 1 % at 10000) [startup {alertd.startup:.0f} s]",
                        flush=True,
                    )
                finally:
                    alertd.stop()
                    assert server.stdin is not None
                    server.stdin.close()
                    server.wait(10)
                    os.close(fd)
    finally:
        receiver.stop()


if __name__ == "__main__":
    main()
