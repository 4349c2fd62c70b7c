"""A storm of firing alerts (a NaN in thousands of series at once) is grouped, never thousands of messages."""

from __future__ import annotations

from alertd.dispatch.plan import STORM_KEY
from alertd.model import Transition, TransitionKind

from .helpers import FIRING, RESOLVED, Table, route, tr

BY_METRIC = {"receivers": ["chat", "ops"], "group_by": ["rule", "metric"], "group_wait": "0s", "group_interval": "1m"}


def storm(n: int, time: float = 0.0, state: TransitionKind = FIRING, runs: int = 2) -> list[Transition]:
    """A NaN in `n` metrics of `runs` runs of a sweep."""
    return [tr("nan", state, time, run=f"sweep{r}", metric=f"layer{i}/norm") for i in range(n) for r in range(runs)]


def test_ten_thousand_alerts_of_one_group_are_one_notification() -> None:
    t = Table(route({"receivers": ["chat"], "group_by": ["rule", "run"], "group_wait": "0s"}), max_notifications=10)
    t.step(0.0, *storm(10_000, runs=1))  # inserted in one pass: a group's alerts are copied once, not once per alert
    assert t.last is not None
    (note,) = t.last.notifications
    assert note.receiver == "chat" and len(note.alerts) == 10_000
    assert note.group_key.endswith('{rule="nan",run="sweep0"}')


def test_a_storm_of_groups_goes_to_each_receiver_as_one_and_each_group_keeps_its_log() -> None:
    t = Table(route(BY_METRIC), max_notifications=10)
    canary = tr("loss_nan", FIRING, 0.0, run="canary", metric="loss")
    t.step(0.0, *storm(500), canary)
    assert t.last is not None
    notes = t.last.notifications
    assert sorted(n.receiver for n in notes) == ["chat", "ops"]  # 501 groups: one notification to each receiver
    for n in notes:
        assert len(n.alerts) == 1001 and n.status == "firing"
        assert n.alerts[0] == canary  # the smallest groups first: a lone alert is not lost in the storm
        assert n.group_labels == () and n.group_key == STORM_KEY + ":{}"  # no group label all the groups share
    assert len(t.last.log_updates) == 2 * 501  # each group's log entry, as if it had gone alone
    assert t.step(30.0) == []  # nothing again: each group's log says its alerts were sent
    # The storm resolves within a group_interval: its resolutions go out together at the groups' next flush.
    t.step(40.0, *storm(500, 40.0, RESOLVED))
    resolved = ("nan/sweep0:resolved",) * 500 + ("nan/sweep1:resolved",) * 500
    assert t.step(60.0) == [("chat", "resolved", resolved), ("ops", "resolved", resolved)]


def test_up_to_the_bound_each_group_goes_alone_and_0_means_no_bound() -> None:
    t = Table(route(BY_METRIC), max_notifications=10)
    assert len(t.step(0.0, *storm(10))) == 20  # ten groups: each its own notification, to each receiver
    eleven = Table(route(BY_METRIC), max_notifications=10)
    assert len(eleven.step(0.0, *storm(11))) == 2  # eleven: as one, under the group labels they share
    assert eleven.last is not None
    for n in eleven.last.notifications:
        assert dict(n.group_labels) == {"rule": "nan"} and n.group_key == STORM_KEY + ':{rule="nan"}'
    unbounded = Table(route(BY_METRIC))
    assert len(unbounded.step(0.0, *storm(500))) == 1000  # Alertmanager's own way
