"""Soak benchmark: 10 minutes of 50 live runs, a flapping receiver and a SIGKILL of alertd every minute.

Run as `python bench/bench_soak.py` (`SOAK_SECONDS` shortens it). Fifty runs each append
`step=N loss=X` to their own `logs/runK.log` once a second; every run has NaN episodes (two NaN steps,
then finite again), ~40 s apart, each one a firing and a resolved notification (one group per run).
alertd (`python -m alertd`, text-log source, webhook) is SIGKILLed every minute and started again at
once. The receiver on 127.0.0.1 answers every third request 503 and is down (all 503) for 10 s out of
every 40. At the end the runs stop writing, the receiver takes everything, and alertd gets until
its longest backoff (5 min) to deliver the rest; it stops as soon as all are in.

Printed: notifications due (two per episode), delivered (distinct notifications received, by status
and alerts), missing, duplicate deliveries of one key (at-least-once: allowed, and what a receiver drops
by key), notifications received under more than one key (must be 0), and alertd's RSS at the start and
at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from alertd.testing.receiver import Receiver

SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
RUNS = 50
KILL_EVERY = 60.0
EPISODE_EVERY = 40.0
RULES = """
sources: [{{name: logs, type: textlog, path: "{logs}/*.log", interval: 1s}}]
notifiers: {{hook: {{type: webhook, url: "{url}", timeout: 2s}}}}
route: {{receivers: [hook], group_by: [run], group_wait: 0s, group_interval: 2s, repeat_interval: 24h}}
rules:
  - {{name: loss_not_finite, metric: loss, condition: nonfinite, severity: critical}}
"""


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Runs(threading.Thread):
    """Fifty trainers writing their logs; counts the NaN episodes it wrote."""

    def __init__(self, logs: Path, until: float) -> None:
        super().__init__(daemon=True)
        self.logs, self.until, self.episodes = logs, until, 0
        self.written: list[tuple[str, int]] = []
        """(run, step) of each episode's first NaN."""

    def run(self) -> None:
        files = [(self.logs / f"run{i:02d}.log").open("a", buffering=1) for i in range(RUNS)]
        start = time.monotonic()
        step = 0
        was_nan = [False] * RUNS
        while time.monotonic() < self.until:
            for i, f in enumerate(files):
                phase = (step + i * 3) % int(EPISODE_EVERY)  # staggered: each run has its own schedule
                nan = phase in (20, 21) and time.monotonic() + 5 < self.until
                if nan and not was_nan[i]:  # an episode begins (its resolution follows within 5 s)
                    self.episodes += 1
                    self.written.append((f"run{i:02d}.log", step))
                was_nan[i] = nan
                f.write(f"step={step} loss={'nan' if nan else 2.0 - step / 10000}\n")
            step += 1
            time.sleep(max(0.0, start + step - time.monotonic()))
        for f in files:
            f.close()


def _flap(receiver: Receiver, stop: threading.Event) -> None:
    """Every third request 503 for 30 s, then down for 10 s, until `stop` (then it leaves the receiver be)."""
    while not stop.is_set():
        receiver.recorder.fail_every = 3
        if stop.wait(30):
            return
        receiver.recorder.fail_every = 1  # down: every request 503
        stop.wait(10)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs, state, rules = root / "logs", root / "state", root / "rules.yaml"
        logs.mkdir()
        receiver = Receiver()
        rules.write_text(RULES.format(logs=logs, url=receiver.url))
        log = (root / "alertd.log").open("wb")
        cmd = [sys.executable, "-m", "alertd", "--rules", str(rules), "--state-dir", str(state), "--log-format", "json"]
        start = time.monotonic()
        end = start + SECONDS
        writers = Runs(logs, end)
        writers.start()
        stop_flapping = threading.Event()
        flapper = threading.Thread(target=_flap, args=(receiver, stop_flapping), daemon=True)
        flapper.start()
        alertd = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(10)
        rss_start = _rss_mib(alertd.pid)
        kills = 0
        while time.monotonic() < end:
            time.sleep(min(KILL_EVERY, max(0.0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            alertd.send_signal(signal.SIGKILL)
            alertd.wait()
            kills += 1
            alertd = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        writers.join()
        due = 2 * writers.episodes
        stop_flapping.set()
        flapper.join()  # (it used to wake after this point and take the receiver down again for the drain)
        receiver.recorder.fail_every = 0
        deadline = time.monotonic() + 330  # a row's backoff is capped at 5 minutes
        while len(receiver.recorder.keys_by_content()) < due and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)
        rss_end = _rss_mib(alertd.pid)
        alertd.send_signal(signal.SIGTERM)
        status = alertd.wait(30)
        receiver.stop()
        log.close()
        db = sqlite3.connect(state / "alertd.db")
        pending = db.execute(
            "SELECT COUNT(*), MAX(attempts), MAX(next_attempt_at) FROM outbox WHERE status = 'pending'"
        ).fetchone()
        failed = db.execute("SELECT COUNT(*) FROM outbox WHERE status = 'failed'").fetchone()[0]
        db.close()
        rec = receiver.recorder
        by_content = rec.keys_by_content()
        delivered = rec.delivered()
        duplicates = sum(n - 1 for n in delivered.values())
        rekeyed = sum(1 for keys in by_content.values() if len(keys) > 1)
        print(
            f"soak: {SECONDS:.0f} s, {RUNS} live runs (text logs), {kills} SIGKILLs (one a minute), receiver "
            f"answering every 3rd request 503 and down 10 s in 40; alertd's last exit status {status}"
        )
        print(
            f"soak: notifications due {due}, delivered {len(by_content)} (missing {due - len(by_content)}), "
            f"requests {rec.requests()}, duplicate deliveries by key {duplicates}, "
            f"notifications under more than one key {rekeyed}"
        )
        if pending[0]:
            print(
                f"soak: still in the outbox at the end: {pending[0]} pending (up to {pending[1]} attempts, next try "
                f"in {pending[2] - time.time():.0f} s: exponential backoff, capped at 5 min), {failed} failed"
            )
        print(f"soak: alertd RSS at start {rss_start:.1f} MiB, at end {rss_end:.1f} MiB")
        got = Counter(
            (a["labels"]["run"], a["status"])
            for b in rec.bodies
            for a in b["alerts"]  # type: ignore[attr-defined]
        )
        want = Counter((run, status) for run, _ in writers.written for status in ("firing", "resolved"))
        if want - got:
            print(f"soak: missing (run, status): {sorted((want - got).elements())}; episodes {writers.written[-60:]}")
            shutil.copy(root / "alertd.log", "/tmp/soak-alertd.log")
            print("soak: alertd's log is kept in /tmp/soak-alertd.log")


if __name__ == "__main__":
    main()
