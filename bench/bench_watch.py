"""File-system notifications vs polling on a TensorBoard source (`watch: notify` vs `watch: poll`, issue 16):
detection latency, and the CPU alertd spends idle and per wake-up as the logdir grows.

    python bench/bench_watch.py

alertd runs as its own process (`python -m alertd run`, state in a temporary directory) with one
`tensorboard` source (`interval: 1s`, `rescan: 60s`) and the given `watch:`; a NaN rule routes to a
webhook (`alertd.testing.receiver.Receiver` on 127.0.0.1) with `group_wait: 0s`, grouped by run. Each
figure's line ends with what alertd logged about how it watches (notifications, or why it polls).

1. Latency: 100 run directories (20 when polled), each with an event file holding one finite loss, are found by alertd
   first; then, one run at a time, a NaN loss is appended to its file (one `write()` of a framed record,
   the file kept open as a trainer keeps it). Each run is its own alert (`group_by: [rule, run]`). The
   figure is from just before the write to the webhook's arrival (the receiver's `time.monotonic()`).
   The writes are spread at random over the poll interval, so the poll figure is not phase-locked.
   Beside the notified figure, the HTTP exchange by itself: a process of its own POSTs the last alert's body
   to the same receiver through httpx (as alertd's webhook notifier does), 100 times; the difference of the
   medians is what alertd spends reading, judging and committing the alert.
2. CPU of the alertd process with a logdir of 10, 1,000 and 10,000 run directories, each holding one
   small event file written before alertd starts (framed bytes written directly: no TensorBoard writer,
   so setup stays fast); one of them is live. The notify and the poll alertd run side by side, each on
   its own copy of the logdir (CPU time is per process; running them one after the other would take
   twice as long). Once startup has read everything (the CPU used per second has stopped falling) and
   alertd has done its first housekeeping (10 s after "alertd started"; the first costs several times
   a later one), idle is the CPU used over 10 s with no writes. Then a window as long: 20 writes to the
   live run 100-200 ms apart (each its own wake-up with notifications), then quiet; per wake-up = (CPU
   over the window - idle rate x window) / 20. Both windows span one housekeeping period and start 2.5
   s after a housekeeping, so each holds exactly one. With polling, writes do not wake alertd (its
   polls run anyway): the poll figure is the extra CPU per write read, a small difference of two large
   figures at 10,000 runs.
   CPU time is the scheduler's run time of each of alertd's threads (/proc/<pid>/task/*/schedstat), in
   nanoseconds: utime + stime count 10 ms ticks, too coarse for 20 wake-ups of under 1 ms. alertd's
   threads live as long as it does, so none of its time is lost with an ended thread.

Event file names carry a time and a host but no pid (tensorboardX style), so no writer claim is
checked against /proc. Figures only: nothing here asserts a timing. Also printed: the inotify limits
(each watched directory takes one of `max_user_watches`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from tensorboard.compat.proto import event_pb2

from alertd.service.service import HOUSEKEEPING_EVERY
from alertd.sources.tensorboard.tfrecord import frame
from alertd.testing.receiver import Receiver
from alertd.testing.tbwriter import scalar_record

INTERVAL = 1.0
RESCAN = "60s"
TRIALS = 20
NOTIFY_TRIALS = 100
"""Notified alerts timed: enough for a p99."""
RUN_COUNTS = (10, 1_000, 10_000)
WINDOW = HOUSEKEEPING_EVERY
WAKEUPS = 20
SETTLE_TIMEOUT = 90.0
MODES = ("notify", "poll")
EVENT_NAME = "events.out.tfevents.1700000000.benchhost"

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: {interval}s, watch: {watch}, rescan: {rescan}}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


def record(value: float, step: int) -> bytes:
    """One framed event record holding the scalar `train/loss`."""
    return scalar_record("train/loss", value, step)


FILE_HEAD = frame(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())


class EventFile:
    """A run's event file, kept open and appended to as a trainer does: one `write()` per record."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(run_dir / EVENT_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.step = 0
        os.write(self.fd, FILE_HEAD + record(1.0, 0))

    def write(self, value: float) -> None:
        self.step += 1
        os.write(self.fd, record(value, self.step))

    def close(self) -> None:
        os.close(self.fd)


def make_logdir(logdir: Path, runs: int) -> EventFile:
    """`runs` run directories with one small event file each; the last is the live one, returned open."""
    data = FILE_HEAD + record(1.0, 0)
    logdir.mkdir(parents=True)
    for i in range(runs - 1):
        run = logdir / f"run{i:05d}"
        run.mkdir()
        (run / EVENT_NAME).write_bytes(data)
    return EventFile(logdir / "live")


class Alertd:
    """`python -m alertd run` on one tensorboard source, its log in `<work>/alertd-<label>.log`."""

    def __init__(self, work: Path, label: str, logdir: Path, watch: str, url: str) -> None:
        rules = work / f"rules-{label}.yaml"
        rules.write_text(RULES.format(logdir=logdir, interval=INTERVAL, watch=watch, rescan=RESCAN, url=url))
        state = work / f"state-{label}"
        self.log = work / f"alertd-{label}.log"
        cmd = [sys.executable, "-m", "alertd", "run", "--rules", str(rules), "--state-dir", str(state)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*cmd, "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=log)
        self.started = time.monotonic()
        self.startup = math.nan
        self._previous, self._last = math.inf, self.cpu()

    def cpu(self) -> float:
        """CPU seconds used so far by all of alertd's threads."""
        total = 0
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            with contextlib.suppress(OSError):  # a thread that has just ended
                total += int(Path(f"/proc/{self.proc.pid}/task/{tid}/schedstat").read_text().split()[0])
        return total / 1e9

    def settled(self) -> bool:
        """Call once a second: whether startup is over, i.e. the CPU used in the last second is under half
        a second and no longer falling (at least 75 % of the second before). Sets `startup`, the seconds
        from the start to then."""
        if self.proc.poll() is not None:
            raise SystemExit(f"bench_watch: alertd exited with {self.proc.returncode}, see {self.log.name}")
        now = self.cpu()
        used, self._last = now - self._last, now
        done = used < 0.5 and used >= 0.75 * self._previous - 0.002
        self._previous = used
        if done:
            self.startup = time.monotonic() - self.started
        return done

    def started_at(self) -> float:
        """The `time.monotonic()` at which alertd logged "alertd started" (its scheduler began then)."""
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") == "alertd started":
                    wall = datetime.fromisoformat(entry["time"]).timestamp()
                    return time.monotonic() - (time.time() - wall)
        raise SystemExit(f"bench_watch: alertd never logged that it started, see {self.log.name}")

    def watching(self) -> str:
        """What alertd logged about how its source learns of changes, shortened."""
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                msg = str(json.loads(line).get("msg", ""))
                if m := re.match(r"source tb: reading on file-system notifications \((\d+) directories", msg):
                    return f"alertd: notified, {m[1]} directories watched"
                if m := re.match(r"source tb: polling every \S+ \((.*)\)$", msg):
                    return f"alertd: polling ({m[1]})"
        return "alertd: logged no watch mode"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def settle(*alertds: Alertd) -> None:
    """Wait until every one of `alertds` has finished starting up."""
    waiting = list(alertds)
    while waiting:
        time.sleep(1.0)
        waiting = [a for a in waiting if not a.settled()]
        if waiting and time.monotonic() - alertds[0].started > SETTLE_TIMEOUT:
            raise SystemExit(f"bench_watch: alertd's CPU use did not settle within {SETTLE_TIMEOUT:g} s")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def latency(work: Path, watch: str, receiver: Receiver, trials: int = TRIALS) -> tuple[list[float], str]:
    """NaN written -> webhook received, in seconds, for `trials` fresh alerts; and how alertd watched."""
    logdir = work / f"latency-{watch}"
    logdir.mkdir()
    alertd = Alertd(work, f"latency-{watch}", logdir, watch, receiver.url)
    try:
        settle(alertd)
        files = [EventFile(logdir / f"trial{i}") for i in range(trials)]
        time.sleep(3 * INTERVAL)  # Let alertd find every run.
        out = []
        for i, f in enumerate(files):
            time.sleep(random.uniform(0, INTERVAL))
            seen = len(receiver.recorder.arrivals)
            t0 = time.monotonic()
            f.write(math.nan)
            while len(receiver.recorder.arrivals) == seen and time.monotonic() - t0 < 15:
                time.sleep(0.0005)
            if len(receiver.recorder.arrivals) == seen:
                raise SystemExit(f"bench_watch: no webhook for trial {i} ({watch}) within 15 s")
            body = receiver.recorder.bodies[-1]
            assert body["alerts"][0]["labels"]["run"] == f"trial{i}", body  # type: ignore[index]
            out.append(receiver.recorder.arrivals[-1] - t0)
            f.close()
        return out, alertd.watching()
    finally:
        alertd.stop()


POSTER = r"""
import asyncio, json, sys, time
import httpx
async def main():
    body = sys.stdin.buffer.read()
    async with httpx.AsyncClient() as client:
        for i in range(int(sys.argv[2]) + 1):  # the first warms up, as alertd's start-up does (alertd.notify.warm)
            await asyncio.sleep(0.02)
            t0 = time.monotonic()
            headers = {"Content-Type": "application/json", "User-Agent": "alertd", "Idempotency-Key": f"post-{i}"}
            response = await client.post(sys.argv[1], content=body, headers=headers)
            await response.aread()
            if i:
                print(t0, flush=True)
asyncio.run(main())
"""


def post_alone(receiver: Receiver, body: dict[str, object], trials: int = NOTIFY_TRIALS) -> list[float]:
    """The HTTP exchange by itself: a process of its own POSTs `body` (the last alert's, as delivered) to the
    same receiver `trials` times through httpx (after one POST that warms it up), as alertd's webhook notifier
    does; seconds from just before each POST to the receiver's arrival (the same clock as the latency trials)."""
    seen = len(receiver.recorder.arrivals)
    done = subprocess.run(
        [sys.executable, "-c", POSTER, receiver.url, str(trials)],
        input=json.dumps(body).encode(),
        capture_output=True,
        check=True,
        timeout=120,
    )
    starts = [float(line) for line in done.stdout.split()]
    arrivals = receiver.recorder.arrivals[seen + 1 :]
    assert len(arrivals) == len(starts) == trials, (len(arrivals), len(starts))
    return [a - t for a, t in zip(arrivals, starts, strict=True)]


def cpu(work: Path, runs: int, url: str) -> dict[str, tuple[Alertd, float, float]]:
    """Per watch mode, side by side: (its alertd, idle CPU in cores, CPU seconds per wake-up)."""
    lives = {watch: make_logdir(work / f"runs{runs}-{watch}", runs) for watch in MODES}
    alertds = {watch: Alertd(work, f"cpu{runs}-{watch}", work / f"runs{runs}-{watch}", watch, url) for watch in MODES}
    try:
        settle(*alertds.values())
        # Housekeeping runs every HOUSEKEEPING_EVERY from "alertd started": begin 2.5 s after one has run.
        first = max(a.started_at() for a in alertds.values()) + HOUSEKEEPING_EVERY + WINDOW / 4
        while first < time.monotonic():
            first += WINDOW
        time.sleep(max(0.0, first - time.monotonic()))
        c0, t0 = {w: a.cpu() for w, a in alertds.items()}, time.monotonic()
        time.sleep(WINDOW)
        c1, t1 = {w: a.cpu() for w, a in alertds.items()}, time.monotonic()
        for _ in range(WAKEUPS):
            for live in lives.values():
                live.write(1.0)
            time.sleep(random.uniform(0.1, 0.2))
        time.sleep(max(0.0, t1 + WINDOW - time.monotonic()))
        c2, t2 = {w: a.cpu() for w, a in alertds.items()}, time.monotonic()
        out = {}
        for watch, alertd in alertds.items():
            idle = (c1[watch] - c0[watch]) / (t1 - t0)
            out[watch] = alertd, idle, ((c2[watch] - c1[watch]) - idle * (t2 - t1)) / WAKEUPS
        return out
    finally:
        for alertd in alertds.values():
            alertd.stop()
        for live in lives.values():
            live.close()


def main() -> None:
    started = time.monotonic()
    limits = Path("/proc/sys/fs/inotify")
    watches = (limits / "max_user_watches").read_text().strip()
    instances = (limits / "max_user_instances").read_text().strip()
    print(f"inotify limits: max_user_watches {watches}, max_user_instances {instances}", flush=True)
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="alertd-watch-") as tmp:
        work = Path(tmp)
        try:
            notify, how = latency(work, "notify", receiver, NOTIFY_TRIALS)
            print(
                f"latency NaN->webhook, notify: median {1e3 * statistics.median(notify):.1f} ms, "
                f"p95 {1e3 * percentile(notify, 0.95):.1f} ms, p99 {1e3 * percentile(notify, 0.99):.1f} ms, "
                f"max {1e3 * max(notify):.1f} ms over {NOTIFY_TRIALS} trials (target p99 <= 10 ms) [{how}]",
                flush=True,
            )
            alone = post_alone(receiver, receiver.recorder.bodies[-1])
            print(
                f"latency of the webhook's POST alone (httpx from a process of its own, the same body and receiver): "
                f"median {1e3 * statistics.median(alone):.1f} ms, p99 {1e3 * percentile(alone, 0.99):.1f} ms over "
                f"{len(alone)} POSTs; NaN->webhook's median less it: "
                f"{1e3 * (statistics.median(notify) - statistics.median(alone)):.1f} ms (reading, rules, outbox)",
                flush=True,
            )
            poll, how = latency(work, "poll", receiver)
            p95 = percentile(poll, 0.95)
            print(
                f"latency NaN->webhook, poll {INTERVAL:g}s: median {1e3 * statistics.median(poll):.0f} ms, "
                f"p95 {1e3 * p95:.0f} ms over {TRIALS} trials (p95/interval {p95 / INTERVAL:.2f}, target <= 1.5) "
                f"[{how}]",
                flush=True,
            )
            for runs in RUN_COUNTS:
                for watch, (alertd, idle, per) in cpu(work, runs, receiver.url).items():
                    if watch == "notify":
                        what, per_what, target = "notify", "per wake-up", " (target idle < 1 %, wake-up < 1 ms)"
                    else:
                        what, per_what, target = f"poll {INTERVAL:g}s", "per write", ""
                    print(
                        f"cpu {runs} runs, {what}: idle {100 * idle:.2f} % of a core, {per_what} {1e3 * per:.2f} ms"
                        f"{target} [startup {alertd.startup:.0f} s; {alertd.watching()}]",
                        flush=True,
                    )
        except BaseException:
            for log in sorted(work.glob("alertd-*.log")):
                sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
            raise
        finally:
            receiver.stop()
    print(f"bench_watch: {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
