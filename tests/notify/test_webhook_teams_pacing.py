"""Teams is held to its documented 4 requests a second per webhook: a burst of notifications delivered
through the real dispatcher, in real time, reaches a receiver on 127.0.0.1 at most 4 in any second."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from notify_helpers import RecordingServer, transition, webhook

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.route_config import RouteConfig

COUNT = 10
MARGIN = 0.2
"""Seconds of slack for the time between an attempt's start and its arrival (a loaded CI machine)."""


def test_teams_rate_limit_is_four_a_second() -> None:
    assert webhook("https://example.invalid/x", "teams").rate_limit == (4, 1.0)


@pytest.mark.anyio
async def test_a_burst_reaches_teams_at_most_four_a_second(tmp_path: Path, server: RecordingServer) -> None:
    server.answer(202, "")
    notifier = webhook(server.url("/workflows/trigger"), "teams")
    d = Dispatcher(
        route=RouteConfig.model_validate({"receivers": ["teams"], "group_by": ["run"]}).to_route(),
        outbox=Outbox(tmp_path),
        notifiers={"teams": notifier},
    )
    start = time.monotonic()
    try:
        d.submit([transition(run=f"run{i}", time=0.0, active_at=0.0) for i in range(COUNT)], None, 0.0)
        delivered = 0
        while delivered < COUNT and time.monotonic() - start < 30:
            outs = await d.deliver_due(time.monotonic() - start)
            delivered += sum(o.result == "delivered" for o in outs)
            due = d.outbox.next_due()
            wait = 0.01 if due is None else due - (time.monotonic() - start)
            await asyncio.sleep(min(max(wait, 0.0), 1.0))
    finally:
        await notifier.aclose()
        d.outbox.close()

    assert delivered == COUNT
    arrivals = sorted(r.at for r in server.requests)
    assert len(arrivals) == COUNT  # nothing was refused or retried
    # any 5 consecutive requests span at least a second: never more than 4 in one second
    spans = [arrivals[i + 4] - arrivals[i] for i in range(COUNT - 4)]
    assert min(spans) >= 1.0 - MARGIN, spans
    # and the first 4 go at once: pacing, not a crawl
    assert arrivals[3] - arrivals[0] < 0.8
    assert arrivals[-1] - arrivals[0] < 2 * (COUNT / 4) + 2
