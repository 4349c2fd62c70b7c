"""Dry runs that never end (a FIFO named like an event file, a YAML alias bomb) against alertd as a real
process: each ends at its time limit with a clear error, at most four run at once, and meanwhile the
service's own TensorBoard source keeps reading, /healthz answers within a second and SIGTERM ends it."""

from __future__ import annotations

import errno
import itertools
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from api_helpers import Served, alive

from alertd.testing.tbwriter import ScalarWriter

RULES = """\
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
rules:
  - {{name: loss_nan, metric: train/loss, condition: nonfinite}}
"""
TIME_LIMIT = 10.0
"""The API's dry-run time limit (alertd's default)."""


def alias_bomb(levels: int = 9) -> str:
    """A rules file whose aliases expand to 9**levels strings."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"{names[0]}: &{names[0]} [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in itertools.pairwise(names)]
    return "\n".join([*lines, "rules: []"]) + "\n"


def has_reader(fifo: Path) -> bool:
    """Whether some process has the FIFO open for reading (or is blocked opening it)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        assert exc.errno == errno.ENXIO, exc
        return False
    os.close(fd)
    return True


class Requests:
    """Dry runs posted from threads, each with its answer and how long it took."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.threads: list[threading.Thread] = []
        self.answers: list[tuple[str, int, dict[str, Any], httpx.Headers, float]] = []

    def post(self, what: str, body: dict[str, Any]) -> None:
        def go() -> None:
            t = time.monotonic()
            r = self.client.post("/api/v1/dry-run", json=body, timeout=60)
            self.answers.append((what, r.status_code, r.json(), r.headers, time.monotonic() - t))

        thread = threading.Thread(target=go)
        thread.start()
        self.threads.append(thread)

    def join(self) -> list[tuple[str, int, dict[str, Any], httpx.Headers, float]]:
        for thread in self.threads:
            thread.join(60)
        return self.answers


def test_stuck_dry_runs_are_killed_at_their_limit_and_hold_nothing_of_the_service(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    writer = ScalarWriter(logdir / "exp1")
    writer.add_scalar("train/loss", 1.0, 0)
    writer.flush()
    root = tmp_path / "root"
    (root / "stuck").mkdir(parents=True)
    fifo = root / "stuck" / "events.out.tfevents.1700000000.host.1.0"
    os.mkfifo(fifo)
    rules = "rules:\n  - {name: n, metric: train/loss, condition: nonfinite}\n"
    on_fifo = {"rules": rules, "source": {"type": "tensorboard", "path": "stuck"}}
    bomb = {"rules": alias_bomb()}
    env = {"ALERTD_DRY_RUN_ROOTS": str(root)}
    with Served(tmp_path, RULES.format(logdir=logdir), env=env) as alertd:
        alertd.wait(lambda: "exp1" in alertd.get("/api/v1/series").text, "the service's first sample")
        requests = Requests(alertd.client)
        for _ in range(4):
            requests.post("fifo", on_fifo)
        time.sleep(1.5)  # (not `has_reader`: opening the FIFO to look would let its readers go on)
        started = time.monotonic()
        for _ in range(3):
            requests.post("fifo", on_fifo)
            requests.post("bomb", bomb)

        # Meanwhile the service reads its own TensorBoard run, alerts on a NaN, and answers /healthz.
        writer.add_scalar("train/loss", math.nan, 1)
        writer.flush()
        slowest = 0.0
        while "alert loss_nan firing" not in alertd.logs():
            assert time.monotonic() - started < TIME_LIMIT - 2, "no alert while the dry runs hang:\n" + alertd.logs()
            t = time.monotonic()
            assert alertd.get("/healthz", timeout=1.0).status_code == 200
            slowest = max(slowest, time.monotonic() - t)
            time.sleep(0.1)
        assert slowest < 1.0, slowest
        answers = requests.join()

        # The first four ended at the time limit; the six more found every place taken and were not queued.
        assert len(answers) == 10
        limited = [a for a in answers if a[1] == 504]
        busy = [a for a in answers if a[1] == 429]
        assert len(limited) == 4 and len(busy) == 6, [(a[0], a[1], a[2]) for a in answers]
        for _, _, body, _, took in limited:
            assert body["errors"] == [f"the dry run took longer than {TIME_LIMIT:g}s"]
            assert TIME_LIMIT - 1 < took < TIME_LIMIT + 3
        for _, _, body, headers, took in busy:
            assert "4 dry runs are running already" in body["errors"][0] and took < 2
            assert 1 <= int(headers["retry-after"]) <= TIME_LIMIT
        # The workers were killed: nothing holds the FIFO open any more.
        alertd.wait(lambda: not has_reader(fifo), "the FIFO's readers to go", 3)

        # Four alias bombs alone: each ends with a clear error, the service keeps answering.
        requests = Requests(alertd.client)
        for _ in range(4):
            requests.post("bomb", bomb)
        time.sleep(1)
        for _ in range(10):
            t = time.monotonic()
            assert alertd.get("/healthz", timeout=1.0).status_code == 200
            assert time.monotonic() - t < 1.0
            time.sleep(0.3)
        for _, status, body, _, took in requests.join():
            assert status in (400, 413, 504), body  # refused by the YAML limits, out of memory, or too slow
            assert took < TIME_LIMIT + 3 and body["errors"], body

        # A later dry run works.
        ok = {"rules": rules, "samples": [{"metric": "train/loss", "time": 1.7e9, "value": "NaN"}]}
        r = alertd.client.post("/api/v1/dry-run", json=ok, timeout=30)
        assert r.status_code == 200 and [t["state"] for t in r.json()["transitions"]] == ["firing"], r.text

        # SIGTERM while four dry runs hang on the FIFO: alertd and its workers end within 10 s.
        requests = Requests(alertd.client)
        for _ in range(4):
            requests.post("fifo", on_fifo)
        alertd.wait(lambda: len(alertd.workers()) >= 4, "four workers on the FIFO again")
        time.sleep(1.5)
        workers = alertd.workers()
        t = time.monotonic()
        assert alertd.stop(signal.SIGTERM, timeout=15) == 0
        assert time.monotonic() - t < 10
        requests.join()
        assert not any(alive(pid) for pid in workers)
        assert not has_reader(fifo)
