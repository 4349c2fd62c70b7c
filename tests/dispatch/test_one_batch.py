"""An alert that fires and resolves within one submission (one poll's batch) is still notified."""

from __future__ import annotations

from pathlib import Path

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox

from .helpers import FIRING, RESOLVED, describe, route, tr


def test_a_nan_followed_by_a_finite_value_in_one_batch_is_sent_as_firing(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    d = Dispatcher(route=route({"receivers": ["chat"], "group_wait": "0s"}), outbox=outbox, notifiers={})
    d.submit([tr("nan", FIRING, 100.0), tr("nan", RESOLVED, 101.0)], {}, 101.5)
    assert [describe(r.notification) for r in outbox.rows()] == [("chat", "firing", ("nan/r1:firing",))]
    d.submit([], {}, 101.5 + 60)  # The resolution follows at the next group interval.
    assert [describe(r.notification)[1] for r in outbox.rows()] == ["firing", "resolved"]
    outbox.close()


def test_without_a_resolution_nothing_is_split(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    d = Dispatcher(route=route({"receivers": ["chat"], "group_wait": "0s"}), outbox=outbox, notifiers={})
    fired = tr("nan", FIRING, 100.0)
    d.submit([fired, tr("other", FIRING, 100.5)], None, 101.0)
    assert sorted(describe(r.notification)[2] for r in outbox.rows()) == [("nan/r1:firing",), ("other/r1:firing",)]
    outbox.close()
