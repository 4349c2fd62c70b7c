"""Dry runs that never end (a FIFO named like an event file, a YAML alias bomb, a long legitimate one)
against alertd as a real process: each ends at its time limit with a clear error (or is refused at once),
at most four run at once, and meanwhile the service's own TensorBoard source keeps reading, /healthz
answers within a second and SIGTERM ends it."""

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


def heavy() -> dict[str, Any]:
    """A valid dry run of pure work: 1500 rules over 10,000 samples (~0.7 MB; a minute of CPU here)."""
    rules = "".join(f"  - {{name: r{i}, metric: m, condition: '> {i % 7}'}}\n" for i in range(1500))
    samples = [{"metric": "m", "time": 1.7e9 + i, "value": 100} for i in range(10_000)]
    return {"rules": "rules:\n" + rules, "samples": samples}


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
    bomb, slow = {"rules": alias_bomb()}, heavy()
    env = {"ALERTD_DRY_RUN_ROOTS": str(root)}
    with Served(tmp_path, RULES.format(logdir=logdir), env=env) as alertd:
        alertd.wait(lambda: "exp1" in alertd.get("/api/v1/series").text, "the service's first sample")

        def healthz_within_a_second() -> float:
            t = time.monotonic()
            assert alertd.get("/healthz", timeout=1.0).status_code == 200
            took = time.monotonic() - t
            assert took < 1.0
            return took

        # Four dry runs that take long whatever the sources and the YAML loader refuse, then six on the
        # FIFO and the alias bomb: those find every place taken, and are answered at once, not queued.
        requests = Requests(alertd.client)
        for _ in range(4):
            requests.post("slow", slow)
        time.sleep(1.5)
        started = time.monotonic()
        for _ in range(3):
            requests.post("fifo", on_fifo)
            requests.post("bomb", bomb)
        # Meanwhile the service reads its own TensorBoard run, alerts on a NaN, and answers /healthz.
        writer.add_scalar("train/loss", math.nan, 1)
        writer.flush()
        while "alert loss_nan firing" not in alertd.logs():
            assert time.monotonic() - started < TIME_LIMIT - 2, "no alert while the dry runs work:\n" + alertd.logs()
            healthz_within_a_second()
            time.sleep(0.1)
        while any(t.is_alive() for t in requests.threads):
            healthz_within_a_second()
            time.sleep(0.2)
        answers = requests.join()
        assert sorted((a[0], a[1]) for a in answers) == [("bomb", 429)] * 3 + [("fifo", 429)] * 3 + [("slow", 504)] * 4
        for _, status, body, headers, took in answers:
            if status == 504:
                assert body["errors"] == [f"the dry run took longer than {TIME_LIMIT:g}s"]
                assert TIME_LIMIT - 1 < took < TIME_LIMIT + 3
            else:
                assert "4 dry runs are running already" in body["errors"][0] and took < 2
                assert 1 <= int(headers["retry-after"]) <= TIME_LIMIT

        # Six on the FIFO and the alias bomb with the places free: each is cut off at its time limit, or
        # refused at once with a clear error (the YAML loader refuses a bomb), or finds nothing to read (the
        # TensorBoard source skips a FIFO without opening it).
        requests = Requests(alertd.client)
        for _ in range(3):
            requests.post("fifo", on_fifo)
            requests.post("bomb", bomb)
        while any(t.is_alive() for t in requests.threads):
            healthz_within_a_second()
            time.sleep(0.2)
        answers = requests.join()
        assert len(answers) == 6 and sum(a[1] == 429 for a in answers) <= 2, answers
        for what, status, body, _, took in answers:
            if status == 200:
                assert what == "fifo" and body["samples"] == 0, body
                continue
            assert status in (400, 403, 413, 429, 504) and body["errors"], (what, status, body)
            assert took < TIME_LIMIT + 3
            if status == 504:
                assert body["errors"] == [f"the dry run took longer than {TIME_LIMIT:g}s"]
        # Nothing holds the FIFO open any more: the workers reading it were killed.
        alertd.wait(lambda: not has_reader(fifo), "the FIFO's readers to go", 3)

        # A later dry run works.
        ok = {"rules": rules, "samples": [{"metric": "train/loss", "time": 1.7e9, "value": "NaN"}]}
        r = alertd.client.post("/api/v1/dry-run", json=ok, timeout=30)
        assert r.status_code == 200 and [t["state"] for t in r.json()["transitions"]] == ["firing"], r.text

        # SIGTERM while four dry runs work: alertd and its workers end within 10 s.
        requests = Requests(alertd.client)
        for _ in range(4):
            requests.post("slow", slow)
        alertd.wait(lambda: len(alertd.workers()) >= 4, "four workers")
        time.sleep(1.5)
        workers = alertd.workers()
        t = time.monotonic()
        assert alertd.stop(signal.SIGTERM, timeout=15) == 0
        assert time.monotonic() - t < 10
        requests.join()
        assert not any(alive(pid) for pid in workers)
