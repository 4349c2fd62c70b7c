"""Time tables for the actions (kill, stop_file, wandb_stop, slurm): each firing reaches them at once and alone,
whatever the group's timers; repeats, resolutions and restored alerts never do; silences still hold."""

from __future__ import annotations

from alertd.dispatch.matchers import Matcher, Silence

from .helpers import FIRING, RESOLVED, Table, route, tr

H = 3600.0
GROUPED = {
    "receivers": ["chat", "stop"],
    "group_by": ["rule"],
    "group_wait": "30s",
    "group_interval": "5m",
    "repeat_interval": "1h",
}


def test_each_firing_reaches_the_action_at_once_while_people_wait_for_the_group() -> None:
    t = Table(route(GROUPED), immediate=frozenset({"stop"}))
    a = tr("nan", FIRING, 0.0, run="a")
    b = tr("nan", FIRING, 40.0, run="b")  # a second run's NaN joins the open group
    t.run(
        [
            (0.0, [a], [("stop", "firing", ("nan/a:firing",))]),
            (30.0, [], [("chat", "firing", ("nan/a:firing",))]),
            (40.0, [b], [("stop", "firing", ("nan/b:firing",))]),
            (330.0, [], [("chat", "firing", ("nan/a:firing", "nan/b:firing"))]),
            (330.0 + H, [], [("chat", "firing", ("nan/a:firing", "nan/b:firing"))]),  # a repeat: people only
            (330.0 + H + 10, [tr("nan", RESOLVED, 330.0 + H + 10, run="a")], []),
            (630.0 + H, [], [("chat", "firing", ("nan/a:resolved", "nan/b:firing"))]),
        ]
    )


def test_a_restored_firing_alert_is_not_sent_to_the_action_again() -> None:
    # After a restart the planner sees firing alerts it holds no group for: people hear of them, the action
    # (which acted when the alert fired, before the restart) does not act again.
    t = Table(route({"receivers": ["chat", "stop"]}), immediate=frozenset({"stop"}))
    a = tr("nan", FIRING, 0.0, run="a")
    t.step(0.0, a)
    restarted = Table(route({"receivers": ["chat", "stop"]}), immediate=frozenset({"stop"}), alerts=dict(t.alerts))
    assert restarted.step(10.0) == [("chat", "firing", ("nan/a:firing",))]


def test_a_silenced_firing_never_reaches_the_action() -> None:
    silence = Silence("s1", (Matcher.parse('run="a"'),), starts_at=0.0, ends_at=100.0)
    t = Table(route({"receivers": ["stop"]}), silences=[silence], immediate=frozenset({"stop"}))
    assert t.step(1.0, tr("nan", FIRING, 1.0, run="a")) == []
    assert t.last is not None and ("silenced", "s1") in [(s.reason, s.by) for s in t.last.suppressed]
    assert t.step(2.0, tr("nan", FIRING, 2.0, run="b")) == [("stop", "firing", ("nan/b:firing",))]


def test_one_receiver_named_by_two_routes_acts_once() -> None:
    root = route(
        {
            "receivers": ["chat"],
            "routes": [
                {"match": {"severity": "critical"}, "receivers": ["stop"], "continue": True},
                {"match": {"rule": "nan"}, "receivers": ["stop", "chat"]},
            ],
        }
    )
    t = Table(root, immediate=frozenset({"stop"}))
    got = t.step(0.0, tr("nan", FIRING, 0.0, severity="critical"))
    assert [n for n in got if n[0] == "stop"] == [("stop", "firing", ("nan/r1:firing",))]
