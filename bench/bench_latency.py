"""Action latency, end to end: a NaN written to a TensorBoard file -> the training process receiving its
first signal from the kill notifier (the verified writer of the file), with file-system notifications and
with polling only, side by side.

    python bench/bench_latency.py

alertd runs as its own process, once with `watch: notify` and once with `watch: poll` at a 1 s
interval; the writes are spread at random over the interval so the polled figure is not phase-locked
to the poll. (NaN -> webhook, with both, is bench_watch.py's.)
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alertd.testing.receiver import Receiver
from alertd.testing.tbwriter import ScalarWriter

INTERVAL = 1.0
TRIALS = 20
KILL_TRIALS = 8

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: {interval}s, watch: {watch}}}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
  stop: {{type: kill, target: writer, signals: [SIGINT, SIGTERM, SIGKILL], grace: 10s}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s,
         routes: [{{match_re: {{run: "kill.*"}}, receivers: [stop]}}]}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""

TRAINER = r"""
import math, signal, sys, time
from alertd.testing.tbwriter import ScalarWriter
from alertd.runs.writers import hold
got = []
signal.signal(signal.SIGINT, lambda *a: got.append(time.time()))
w = ScalarWriter(sys.argv[1])
w.add_scalar("train/loss", 1.0, 0); w.flush()
held = hold(w.path)  # the verified writer holds its event file (torch's writer alone does not)
print("ready", flush=True)
sys.stdin.readline()
w.add_scalar("train/loss", math.nan, 1); w.flush()
t0 = time.time()
while not got and time.time() - t0 < 20:
    time.sleep(0.001)
print(f"{(got[0] - t0) if got else -1:.6f}", flush=True)
"""


def start_alertd(work: Path, url: str, watch: str = "notify") -> subprocess.Popen[bytes]:
    rules = work / "rules.yaml"
    rules.write_text(RULES.format(logdir=work / "runs", interval=INTERVAL, url=url, watch=watch))
    cmd = [sys.executable, "-m", "alertd", "--rules", str(rules), "--state-dir", str(work / "state")]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(work / "alertd.log", "wb"))


def webhook_latency(work: Path, receiver: Receiver) -> list[float]:
    writers = [ScalarWriter(work / "runs" / f"trial{i}") for i in range(TRIALS)]
    for w in writers:
        w.add_scalar("train/loss", 1.0, 0)
        w.flush()
    time.sleep(4 * INTERVAL)  # Let alertd find every run.
    out = []
    for i, w in enumerate(writers):
        time.sleep(random.uniform(0, INTERVAL))
        seen = len(receiver.recorder.arrivals)
        w.add_scalar("train/loss", math.nan, 1)
        w.flush()
        t0 = time.monotonic()
        while len(receiver.recorder.arrivals) == seen and time.monotonic() - t0 < 15:
            time.sleep(0.001)
        body = receiver.recorder.bodies[-1]
        assert body["alerts"][0]["labels"]["run"] == f"trial{i}", body  # type: ignore[index]
        out.append(receiver.recorder.arrivals[-1] - t0)
        w.close()
    return out


def kill_latency(work: Path) -> list[float]:
    out = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(KILL_TRIALS):
        trainer = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(work / "runs" / f"kill{i}")],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert trainer.stdout is not None and trainer.stdin is not None
        assert trainer.stdout.readline().strip() == "ready"
        time.sleep(3 * INTERVAL + random.uniform(0, INTERVAL))
        trainer.stdin.write("go\n")
        trainer.stdin.flush()
        latency = float(trainer.stdout.readline())
        trainer.kill()
        trainer.wait()
        if latency < 0:
            raise SystemExit("bench_latency: the trainer was never signalled (see alertd's log)")
        out.append(latency)
    return out


def report(what: str, values: list[float], poll: bool) -> None:
    values = sorted(values)
    p95 = values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)]
    med = statistics.median(values)
    if poll:
        print(
            f"action latency, NaN written -> {what}, poll {INTERVAL:g}s: median {med:.2f} s, p95 {p95:.2f} s over "
            f"{len(values)} trials (median = {med / INTERVAL:.2f} x interval, target <= 1.5 x)"
        )
    else:
        print(
            f"action latency, NaN written -> {what}, notify: median {med * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms "
            f"over {len(values)} trials"
        )


def main() -> None:
    receiver = Receiver()
    try:
        for watch in ("notify", "poll"):
            work = Path(tempfile.mkdtemp(prefix="alertd-latency-"))
            alertd = start_alertd(work, receiver.url, watch)
            try:
                time.sleep(1.5)
                report("first signal to the trainer", kill_latency(work), watch == "poll")
            finally:
                alertd.send_signal(signal.SIGTERM)
                alertd.wait(20)
    finally:
        receiver.stop()


if __name__ == "__main__":
    main()
