"""The outbox over a database another connection holds locked: plans go on in memory (delivered, retried,
a group's resolution after its firing), and are written, as they stand, once the database can be written;
a restart then sends nothing twice. A real receiver on 127.0.0.1."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import DB_NAME, Outbox
from alertd.dispatch.pipeline import Backoff

from .helpers import FIRING, RESOLVED, Table, route, tr
from .receiver import HttpTestNotifier, Receiver

pytestmark = pytest.mark.anyio


@contextlib.contextmanager
def locked(state: Path) -> Iterator[None]:
    other = sqlite3.connect(state / DB_NAME, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        other.execute("COMMIT")
        other.close()


def _dispatcher(state: Path, hook: HttpTestNotifier) -> Dispatcher:
    spec = {"receivers": ["hook"], "group_by": ["run"], "group_wait": "0s", "group_interval": "0s"}
    return Dispatcher(
        route=route(spec),
        outbox=Outbox(state),
        notifiers={"hook": hook},
        backoff=Backoff(base=1.0, cap=1.0),
        rng=random.Random(1),
    )


async def test_a_locked_database_delivers_from_memory_and_writes_it_all_once_it_can(
    tmp_path: Path, receiver: Receiver, hook: HttpTestNotifier
) -> None:
    d = _dispatcher(tmp_path, hook)
    table = Table(d.route)
    fired = tr("loss_not_finite", FIRING, 0.0, run="a", severity="critical")
    table.step(0.0, fired)
    wrote: list[str] = []
    with locked(tmp_path):
        receiver.recorder.responses = [(503, {})]  # the first attempt fails: retried, from memory
        d.submit([fired], table.alerts, 0.0, also=lambda db: wrote.append("state"))
        assert d.outbox.unsaved is not None and "locked" in d.outbox.unsaved and wrote == []
        assert [r.status for r in d.outbox.rows()] == ["pending"]
        await d.deliver_due(0.0)
        assert receiver.recorder.delivered() == {} and d.outbox.next_due() is not None
        resolved = tr("loss_not_finite", RESOLVED, 1.0, run="a", severity="critical")
        table.step(1.0, resolved)
        d.submit([resolved], table.alerts, 1.0)
        assert len(d.outbox.rows("pending")) == 2
        await d.deliver_due(1.0)  # the firing is retried at 1 s at the latest: it goes first, then the resolution
        await d.deliver_due(2.0)
        statuses = [b["status"] for b in receiver.recorder.bodies]
        assert statuses == ["firing", "resolved"]
        d.outbox.retry_now()
        d.outbox.commit_plan((), {}, also=lambda db: wrote.append("state"))  # still locked: stays in memory
        assert d.outbox.unsaved is not None
    d.outbox.retry_now()
    d.outbox.commit_plan((), {}, also=lambda db: wrote.append("state"))
    assert d.outbox.unsaved is None and wrote == ["state"]  # (the locked tries never began)
    with contextlib.closing(sqlite3.connect(tmp_path / DB_NAME)) as db:
        rows = sorted(db.execute("SELECT status, attempts FROM outbox"))
    assert rows == [("delivered", 1), ("delivered", 2)]
    d.outbox.close()
    again = _dispatcher(tmp_path, hook)  # a restart: nothing pending, nothing sent twice
    await again.deliver_due(100.0)
    assert receiver.recorder.requests() == 3
    again.outbox.close()
