"""A source whose poll never returns (a hung file system) blinds only itself: it counts as failing, the
other sources and the rules go on, and a stuck thread never keeps the process from ending."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from alertd.clock import FakeClock
from alertd.model import Sample, SeriesKey, make_labels
from alertd.service import Service, sources
from alertd.threads import DaemonExecutor

RULES = """
sources:
  - {{name: stuck, type: samples, path: "{path}", interval: 1s}}
  - {{name: fine, type: samples, path: "{path}", interval: 1s}}
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
  - {{name: source_failing, metric: alertd.source.up, condition: "< 1"}}
"""


class Hung:
    """A source whose poll blocks its thread until released (what a read on a hung NFS mount does)."""

    interval = 1.0

    def __init__(self) -> None:
        self.release = threading.Event()

    async def poll(self, now: float) -> Sequence[Sample]:
        await asyncio.to_thread(self.release.wait)
        return []

    async def aclose(self) -> None:
        self.release.set()


def test_a_poll_that_never_returns_counts_as_failing_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "POLL_TIMEOUT", 0.2)
    (tmp_path / "s.jsonl").touch()
    (tmp_path / "rules.yaml").write_text(RULES.format(path=tmp_path / "s.jsonl"))
    clock = FakeClock(1000.0)
    service = Service([str(tmp_path / "rules.yaml")], clock=clock, state=tmp_path / "state")
    service.open()
    hung = Hung()
    service.sources["stuck"] = hung  # type: ignore[assignment]

    async def scenario() -> tuple[list[str], str | None]:
        await service.runner.poll("stuck")  # returns after interval + POLL_TIMEOUT, the poll still hanging
        assert service.health["stuck"].failures == 1
        error = service.health["stuck"].last_error
        clock.t = 1005.0
        await service.runner.poll("stuck")  # not started again: still waiting for the first
        loss = Sample(SeriesKey("loss", make_labels({"source": "fine", "run": "a"})), 1005.0, 1, float("nan"))
        service.ingest([loss], 1005.0)  # the other sources' samples are evaluated as ever
        firing = sorted(a.rule for a in service.engine.state.alerts(service.engine.ruleset.rules))
        hung.release.set()
        await asyncio.sleep(0.2)  # the thread returns
        clock.t = 1500.0
        await service.runner.poll("stuck")  # the hung poll returned: the source is up again
        assert service.health["stuck"].failures == 0
        return firing, error

    firing, error = asyncio.run(scenario())
    assert firing == ["nan", "source_failing"]
    assert error == "TimeoutError: a poll has not returned within 1.2s; waiting for it"
    service.close()


def test_a_stuck_daemon_thread_does_not_keep_the_process_from_ending(tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(
        "import asyncio, threading\n"
        "from alertd.threads import DaemonExecutor\n"
        "async def main():\n"
        "    asyncio.get_running_loop().set_default_executor(DaemonExecutor())\n"
        "    asyncio.get_running_loop().run_in_executor(None, threading.Event().wait)\n"
        "    await asyncio.sleep(0.1)\n"
        "asyncio.run(main())\n"
        "print('ended')\n"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert out.stdout == "ended\n" and out.returncode == 0
    assert time.monotonic() - started < 10


def test_the_daemon_executor_runs_jobs_in_parallel_and_reports_errors() -> None:
    pool = DaemonExecutor(max_workers=4)
    gate = threading.Barrier(4, timeout=5)
    futures = [pool.submit(gate.wait) for _ in range(4)]  # would deadlock unless all four run at once
    assert sorted(f.result(5) for f in futures) == [0, 1, 2, 3]
    failing = pool.submit(int, "x")
    with pytest.raises(ValueError):
        failing.result(5)
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(int, "1")
