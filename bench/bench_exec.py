"""Benchmark of `alertd exec`: from `loss=nan` printed by the child to the stop request reaching it.

Run as `python bench/bench_exec.py`. Each trial starts `alertd exec` on rules whose `kill` notifier
(`target: child`, first signal SIGINT) stops the run on `loss_not_finite`; the child prints a few
finite losses, waits a random 0-1 s, notes the time and prints `step=N loss=nan`, and notes when its
SIGINT handler runs. The figure is the difference (both clocks are this machine's `time.time()`).

Twice: each trial with a state directory of its own, and every trial relaunched in one directory with one
state (as a user reruns a command): a relaunched run is a new incident, stopped as fast, with one SIGINT
(the number of SIGINTs each child received is counted; it stays 0.5 s to see a second one).

The anchor, in the same run: the classic shell loop (`tail train.log | grep -q nan && kill -INT $pid`)
beside the same child writing to `train.log`, at a 1 s interval (60 times more eager than the usual
`sleep 60`, whose median is then 30 s by construction).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRIALS = int(os.environ.get("BENCH_TRIALS", "20"))
RULES = """
notifiers:
  stop: {type: kill, target: child, signals: [SIGINT, SIGTERM], grace: 10s}
route: {receivers: [stop], group_wait: 0s}
rules:
  - {name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}
"""
CHILD = r"""
import os, random, signal, sys, time
out = sys.argv[1]
got = []
def stopped(n, f):
    got.append(time.time())
    with open(out, "a") as fh:
        fh.write(f"recv {time.time()!r}\n")
signal.signal(signal.SIGINT, stopped)
for step in range(5):
    print(f"step={step} loss={2.0 - step / 10}", flush=True)
time.sleep(1.0 + random.random())
t0 = time.time()
with open(out, "a") as fh:
    fh.write(f"sent {t0!r}\n")
print("step=5 loss=nan", flush=True)
while not got or time.time() < got[0] + 0.5:
    time.sleep(0.005)
"""
FLOOD_LINES = int(os.environ.get("BENCH_FLOOD_LINES", "500000"))
FLOOD_TRIALS = int(os.environ.get("BENCH_FLOOD_TRIALS", "5"))
FLOOD = r"""
import sys, time
t0 = time.perf_counter()
for i in range(int(sys.argv[1])):
    print(f"line {i}")
sys.stderr.write(f"{time.perf_counter() - t0!r}\n")
"""
ANCHOR = "while sleep 1; do tail -n 100 {log} | grep -q nan && {{ kill -INT {pid}; exit 0; }}; done"


def trial_alertd(tmp: Path, i: int, state: str) -> tuple[float, int]:
    """One `alertd exec` trial with the state directory `state`: seconds from the NaN printed to SIGINT
    received, and the number of SIGINTs."""
    out = tmp / f"exec-{state}-{i}.txt"
    cmd = [
        sys.executable,
        "-m",
        "alertd",
        "exec",
        "--rules",
        str(tmp / "rules.yaml"),
        "--state-dir",
        str(tmp / state),
    ]
    subprocess.run(
        [*cmd, "--", sys.executable, str(tmp / "child.py"), str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    return _latency(out), out.read_text().count("recv ")


def trial_anchor(tmp: Path, i: int) -> float:
    """One anchor trial: the child's output to train.log, the shell loop beside it."""
    out, log = tmp / f"anchor-{i}.txt", tmp / f"train-{i}.log"
    with open(log, "w") as f:
        child = subprocess.Popen([sys.executable, str(tmp / "child.py"), str(out)], stdout=f)
        loop = subprocess.Popen(["sh", "-c", ANCHOR.format(log=log, pid=child.pid)])
        child.wait(timeout=60)
        loop.kill()
        loop.wait()
    return _latency(out)


def flood(tmp: Path, under_exec: bool) -> float:
    """Seconds the child takes to print FLOOD_LINES short lines (unbuffered, as alertd exec starts it): under
    alertd exec (its output copied to /dev/null and parsed), or bare into a pipe `cat` drains to /dev/null."""
    child = [sys.executable, str(tmp / "flood.py"), str(FLOOD_LINES)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if under_exec:
        cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(tmp / "rules.yaml"), "--state-dir"]
        done = subprocess.run(
            [*cmd, str(tmp / "flood-state"), "--", *child],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            timeout=600,
            check=True,
        )
        took = [line for line in done.stderr.decode().splitlines() if not line.startswith("{")]
        return float(took[-1])
    with subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL) as cat:
        done = subprocess.run(child, stdout=cat.stdin, stderr=subprocess.PIPE, env=env, timeout=600, check=True)
        assert cat.stdin is not None
        cat.stdin.close()
    return float(done.stderr.decode().split()[-1])


def _latency(out: Path) -> float:
    lines = [line.split() for line in out.read_text().splitlines()]
    sent = next(float(t) for what, t in lines if what == "sent")
    return next(float(t) for what, t in lines if what == "recv") - sent


def _p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def main() -> None:
    """Print the benchmark line."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "rules.yaml").write_text(RULES)
        (tmp / "child.py").write_text(CHILD)
        (tmp / "flood.py").write_text(FLOOD)
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        ours, again, anchor = [], [], []
        signals: list[int] = []
        for i in range(TRIALS):
            ours.append(trial_alertd(tmp, i, f"s{i}")[0])
            latency, count = trial_alertd(tmp, i, "relaunched")
            again.append(latency)
            signals.append(count)
            anchor.append(trial_anchor(tmp, i))
        med, med_r, med_a = statistics.median(ours), statistics.median(again), statistics.median(anchor)
        print(
            f"alertd exec: loss=nan printed -> stop request (SIGINT) at the child: median {med * 1e3:.1f} ms, "
            f"p95 {_p95(ours) * 1e3:.1f} ms over {TRIALS} trials; anchor shell loop (grep every 1 s): median "
            f"{med_a * 1e3:.0f} ms, p95 {_p95(anchor) * 1e3:.0f} ms; ratio {med_a / med:.0f}x"
        )
        bare, ours_flood = [], []
        for _ in range(FLOOD_TRIALS):
            bare.append(flood(tmp, False))
            ours_flood.append(flood(tmp, True))
        med_b, med_f = statistics.median(bare), statistics.median(ours_flood)
        print(
            f"alertd exec: a child printing {FLOOD_LINES:,} short lines takes {med_f:.2f} s under exec (its output "
            f"copied and parsed) against {med_b:.2f} s bare into a pipe (median of {FLOOD_TRIALS}); ratio "
            f"{med_f / med_b:.2f}x (goal: at most 1.2x)"
        )
        print(
            f"alertd exec relaunched {TRIALS} times in one directory (one state): median {med_r * 1e3:.1f} ms, "
            f"p95 {_p95(again) * 1e3:.1f} ms, max {max(again) * 1e3:.1f} ms; SIGINTs per run: "
            f"{min(signals)}..{max(signals)}"
        )


if __name__ == "__main__":
    main()
