"""Time tables for grouping and timing: group_wait, group_interval, repeat_interval, send_resolved."""

from __future__ import annotations

from alertd.dispatch.plan import PlanState, plan
from alertd.model import Transition

from .helpers import FIRING, INACTIVE, PENDING, RESOLVED, Table, route, tr

H = 3600.0


def test_defaults_send_a_nan_alert_at_once_and_repeat_after_four_hours() -> None:
    t = Table(route({"receivers": ["console"]}))
    nan = tr("loss_not_finite", FIRING, 0.0, severity="critical")
    t.run(
        [
            (0.0, [nan], [("console", "firing", ("loss_not_finite/r1:firing",))]),
            (60.0, [], []),
            (2 * H, [], []),
            (4 * H - 1, [], []),
            (4 * H + 60, [], [("console", "firing", ("loss_not_finite/r1:firing",))]),
            (4 * H + 120, [], []),
        ]
    )


def test_group_wait_then_group_interval_for_later_alerts() -> None:
    t = Table(route({"receivers": ["chat"], "group_by": ["rule"], "group_wait": "30s", "group_interval": "5m"}))
    a = tr("grad", FIRING, 0.0, run="a")
    b = tr("grad", FIRING, 40.0, run="b")
    t.run(
        [
            (0.0, [a], []),
            (29.0, [], []),
            (30.0, [], [("chat", "firing", ("grad/a:firing",))]),
            (40.0, [b], []),
            (300.0, [], []),
            (330.0, [], [("chat", "firing", ("grad/a:firing", "grad/b:firing"))]),
            (630.0, [], []),
        ]
    )
    assert t.last is not None and t.last.next_run == 930.0


def test_resolution_sent_once_then_group_dropped() -> None:
    t = Table(route({"receivers": ["chat"], "group_interval": "1m"}))
    t.run(
        [
            (0.0, [tr("hot", FIRING, 0.0)], [("chat", "firing", ("hot/r1:firing",))]),
            (30.0, [tr("hot", RESOLVED, 30.0)], []),
            (60.0, [], [("chat", "resolved", ("hot/r1:resolved",))]),
            (120.0, [], []),
        ]
    )
    assert t.state.groups == {}


def test_send_resolved_off_sends_nothing_on_resolution_but_refire_is_new() -> None:
    t = Table(route({"receivers": ["chat"], "send_resolved": False}))
    t.run(
        [
            (0.0, [tr("hot", FIRING, 0.0)], [("chat", "firing", ("hot/r1:firing",))]),
            (10.0, [tr("hot", RESOLVED, 10.0)], []),
            (60.0, [], []),
            (70.0, [tr("hot", FIRING, 70.0)], [("chat", "firing", ("hot/r1:firing",))]),
        ]
    )


def test_send_resolved_off_partial_resolution_lists_only_firing_alerts() -> None:
    t = Table(route({"receivers": ["chat"], "group_by": ["rule"], "send_resolved": False}))
    t.run(
        [
            (0.0, [tr("hot", FIRING, 0.0, run="a")], [("chat", "firing", ("hot/a:firing",))]),
            (10.0, [tr("hot", FIRING, 10.0, run="b")], []),
            (60.0, [], [("chat", "firing", ("hot/a:firing", "hot/b:firing"))]),
            (70.0, [tr("hot", RESOLVED, 70.0, run="a")], []),
            # nothing new fires and resolved alerts are not sent: no notification
            (120.0, [], []),
        ]
    )


def test_fired_and_resolved_within_group_wait_sends_nothing() -> None:
    t = Table(route({"receivers": ["chat"], "group_wait": "30s"}))
    t.run(
        [
            (0.0, [tr("hot", FIRING, 0.0)], []),
            (10.0, [tr("hot", RESOLVED, 10.0)], []),
            (30.0, [], []),
        ]
    )
    assert t.state.groups == {}


def test_resolved_alert_joins_a_firing_group_update() -> None:
    t = Table(route({"receivers": ["chat"], "group_by": ["rule"]}))
    t.run(
        [
            (
                0.0,
                [tr("hot", FIRING, 0.0, run="a"), tr("hot", FIRING, 0.0, run="b")],
                [("chat", "firing", ("hot/a:firing", "hot/b:firing"))],
            ),
            (10.0, [tr("hot", RESOLVED, 10.0, run="b")], []),
            (60.0, [], [("chat", "firing", ("hot/a:firing", "hot/b:resolved"))]),
            (120.0, [], []),
        ]
    )


def test_group_by_separates_runs_and_dots_mean_every_label() -> None:
    by_run = Table(route({"receivers": ["c"]}))
    got = by_run.step(0.0, tr("nan", FIRING, 0.0, run="a"), tr("nan", FIRING, 0.0, run="b"))
    assert got == [("c", "firing", ("nan/a:firing",)), ("c", "firing", ("nan/b:firing",))]
    one = Table(route({"receivers": ["c"], "group_by": []}))
    assert one.step(0.0, tr("nan", FIRING, 0.0, run="a"), tr("x", FIRING, 0.0, run="b")) == [
        ("c", "firing", ("nan/a:firing", "x/b:firing"))
    ]
    each = Table(route({"receivers": ["c"], "group_by": ["..."]}))
    got = each.step(0.0, tr("nan", FIRING, 0.0, metric="loss"), tr("nan", FIRING, 0.0, metric="val/loss"))
    assert len(got) == 2
    assert each.last is not None
    labels = {dict(n.group_labels)["metric"] for n in each.last.notifications}
    assert labels == {"loss", "val/loss"}


def test_pending_and_inactive_transitions_are_not_notified() -> None:
    t = Table(route({"receivers": ["c"]}))
    t.run(
        [
            (0.0, [tr("gpu_idle", PENDING, 0.0)], []),
            (10.0, [tr("gpu_idle", INACTIVE, 10.0)], []),
            (20.0, [tr("gpu_idle", PENDING, 20.0)], []),
        ]
    )
    assert t.state.groups == {}
    assert t.last is not None and t.last.suppressed == ()


def test_firing_alert_gone_from_the_engine_counts_as_resolved() -> None:
    t = Table(route({"receivers": ["c"]}))
    t.step(0.0, tr("hot", FIRING, 0.0))
    t.alerts.clear()  # the rule was removed by a reload: no resolved transition comes
    assert t.step(60.0) == [("c", "resolved", ("hot/r1:resolved",))]


def test_restart_with_the_log_neither_resends_nor_forgets() -> None:
    t = Table(route({"receivers": ["c"]}))
    t.step(0.0, tr("hot", FIRING, 0.0))
    restarted = Table(t.root, state=PlanState(log=t.state.log), alerts=dict(t.alerts))
    assert restarted.step(100.0) == []  # the engine still has it firing: not sent again
    assert restarted.step(200.0, tr("hot", RESOLVED, 200.0)) == [("c", "resolved", ("hot/r1:resolved",))]
    fresh = Table(t.root, alerts=dict(t.alerts))  # without the log it would be sent again
    assert fresh.step(100.0) == [("c", "firing", ("hot/r1:firing",))]


def test_idempotency_keys_are_stable_and_repeats_get_new_ones() -> None:
    root = route({"receivers": ["c"], "repeat_interval": "1h"})
    t = Table(root)
    t.step(0.0, tr("hot", FIRING, 0.0))
    assert t.last is not None
    first = t.last.notifications[0]
    again = plan(PlanState(), transitions=[tr("hot", FIRING, 0.0)], alerts=None, route=root, now=0.0)
    assert again.notifications[0].key == first.key
    t.step(3600.0)
    repeat = t.last.notifications[0]
    assert repeat.status == "firing" and repeat.key != first.key and repeat.created == 3600.0


def test_next_run_is_the_earliest_group_timer() -> None:
    t = Table(route({"receivers": ["c"], "group_wait": "10s", "group_interval": "1m"}))
    t.step(0.0, tr("hot", FIRING, 0.0))
    assert t.last is not None and t.last.next_run == 10.0
    t.step(10.0)
    assert t.last.next_run == 70.0
    empty = Table(route({"receivers": ["c"]}))
    empty.step(0.0)
    assert empty.last is not None and empty.last.next_run is None


def test_old_alert_skips_group_wait_as_in_alertmanager() -> None:
    t = Table(route({"receivers": ["c"], "group_wait": "30s"}))
    assert t.step(100.0, tr("hot", FIRING, 50.0)) == [("c", "firing", ("hot/r1:firing",))]


def _keys(t: Table, *steps: tuple[float, Transition]) -> list[str]:
    keys = []
    for now, transition in steps:
        t.step(now, transition)
        assert t.last is not None
        keys += [n.key for n in t.last.notifications]
    return keys


def test_a_key_depends_only_on_the_transitions_not_on_the_log_or_the_clock() -> None:
    root = route({"receivers": ["c"], "group_interval": "1s"})
    sent = _keys(Table(root), (10.0, tr("hot", FIRING, 5.0)), (20.0, tr("hot", RESOLVED, 15.0)))
    # the same transitions planned again later with the log lost (the samples read again after a crash)
    again = _keys(Table(root), (500.0, tr("hot", FIRING, 5.0)), (600.0, tr("hot", RESOLVED, 15.0)))
    assert again == sent and len(set(sent)) == 2
    other = _keys(Table(root), (500.0, tr("hot", FIRING, 400.0)))  # it fired again, at another time
    assert other[0] not in sent
