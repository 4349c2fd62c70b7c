"""A log longer than one poll reads (`linetail.MAX_POLL`, here 4 KiB read 1 KiB at a time) is read on at once
by the service, poll after poll, not one piece per scheduled poll (the source's interval here is an hour)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from alertd.clock import FakeClock
from alertd.model import SeriesKey, make_labels
from alertd.service import Service
from alertd.sources import linetail

RULES = """
sources:
  - {{name: logs, type: textlog, path: "{log}", interval: 1h}}
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""
LINES = 3000


def test_the_service_reads_a_long_backlog_on_at_once_and_fires_on_its_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(linetail, "MAX_POLL", 4096)
    monkeypatch.setattr(linetail, "MAX_READ", 1024)
    log = tmp_path / "train.log"
    log.write_text("".join(f"step={s} loss=2.0\n" for s in range(LINES)) + f"step={LINES} loss=nan\n")
    (tmp_path / "rules.yaml").write_text(RULES.format(log=log))
    clock = FakeClock(1000.0)
    service = Service([str(tmp_path / "rules.yaml")], clock=clock, state=tmp_path / "state")
    service.open()
    key = SeriesKey("loss", make_labels({"source": "logs", "run": "train.log"}))

    async def scenario() -> tuple[int, list[str], int]:
        await service.runner.poll("logs")  # the one scheduled poll: the rest is read on from it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            series = service.engine.buffer.get(key)
            if series is not None and series.steps[-1] == LINES:
                break
            await asyncio.sleep(0.01)
        series = service.engine.buffer.get(key)
        last = -1 if series is None else series.steps[-1]
        firing = sorted(a.rule for a in service.engine.state.alerts(service.engine.ruleset.rules))
        polls = service.health["logs"].polls
        await service.runner.stop()  # the source's open log closed, as the service's shutdown does
        return last, firing, polls

    last, firing, polls = asyncio.run(scenario())
    service.close()
    assert last == LINES
    assert firing == ["nan"]
    assert polls > 10  # in bounded pieces
