"""Alertmanager's routing keys and time intervals, as the rules file gives them and the planner applies them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from alertd.config import load_config
from alertd.dispatch import timeintervals as ti
from alertd.dispatch.matchers import Matcher, MatchOp, parse_matchers
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig, TimeIntervalConfig
from alertd.dispatch.routes import Route
from alertd.errors import ConfigError

from .helpers import FIRING, RESOLVED, Table, tr


def at(text: str) -> float:
    return (
        datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
        if "+" not in text
        else (datetime.fromisoformat(text).timestamp())
    )


def period(**spec: Any) -> ti.Period:
    return TimeIntervalConfig.model_validate({"name": "x", "time_intervals": [spec]}).time_intervals[0].to_period()


def test_times_are_start_inclusive_end_exclusive() -> None:
    p = period(times=[{"start_time": "09:00", "end_time": "17:00"}])
    assert p.contains(at("2026-03-02T09:00:00"))
    assert p.contains(at("2026-03-02T16:59:59"))
    assert not p.contains(at("2026-03-02T17:00:00"))
    assert not p.contains(at("2026-03-02T08:59:59"))
    assert period(times=[{"start_time": "22:00", "end_time": "24:00"}]).contains(at("2026-03-02T23:59:00"))


def test_weekdays_months_years_are_inclusive_ranges() -> None:
    p = period(weekdays=["monday:friday"], months=["january:march"], years=["2026"])
    assert p.contains(at("2026-03-02T12:00:00"))  # a Monday in March
    assert p.contains(at("2026-03-06T12:00:00"))  # Friday
    assert not p.contains(at("2026-03-07T12:00:00"))  # Saturday
    assert not p.contains(at("2026-04-01T12:00:00"))  # April
    assert not p.contains(at("2027-03-01T12:00:00"))  # 2027
    assert period(weekdays=["sunday"]).contains(at("2026-03-08T12:00:00"))


def test_negative_days_count_from_the_end_of_each_month() -> None:
    last_three = period(days_of_month=["-3:-1"])
    assert last_three.contains(at("2026-02-26T00:00:00")) and last_three.contains(at("2026-02-28T23:59:00"))
    assert not last_three.contains(at("2026-02-25T23:59:00"))
    assert last_three.contains(at("2026-03-29T00:00:00")) and not last_three.contains(at("2026-03-28T12:00:00"))
    assert period(days_of_month=["1:7"]).contains(at("2026-03-07T23:00:00"))


def test_location_reads_the_fields_in_that_zone() -> None:
    p = period(times=[{"start_time": "09:00", "end_time": "17:00"}], location="Asia/Tokyo")
    assert p.contains(at("2026-03-02T00:00:00"))  # 09:00 in Tokyo
    assert not p.contains(at("2026-03-02T08:00:00"))  # 17:00 in Tokyo


@pytest.mark.parametrize(
    "spec",
    [
        {"times": [{"start_time": "17:00", "end_time": "09:00"}]},
        {"times": [{"start_time": "09:00", "end_time": "24:01"}]},
        {"weekdays": ["friday:monday"]},
        {"weekdays": ["funday"]},
        {"days_of_month": ["0"]},
        {"days_of_month": ["-1:5"]},
        {"days_of_month": ["10:2"]},
        {"months": ["march:january"]},
        {"location": "Mars/Olympus"},
    ],
)
def test_bad_intervals_are_config_errors(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        period(**spec)


def test_alertmanager_matchers_syntax() -> None:
    assert parse_matchers('{severity="critical", run=~"exp.*"}') == (
        Matcher("severity", MatchOp.EQ, "critical"),
        Matcher("run", MatchOp.RE, "exp.*"),
    )
    assert parse_matchers("alertname!=x") == (Matcher("alertname", MatchOp.NE, "x"),)
    assert parse_matchers('a="x,\\"y\\""') == (Matcher("a", MatchOp.EQ, 'x,"y"'),)
    assert parse_matchers('a!~"a\\\\d"') == (Matcher("a", MatchOp.NRE, "a\\d"),)
    for bad in ['a="x', 'a=x"y', "no operator", 'a=~"(unclosed"']:
        with pytest.raises(ValueError):
            parse_matchers(bad)


def _routes(spec: dict[str, Any], intervals: dict[str, list[dict[str, Any]]] | None = None) -> Route:
    cfg = RouteConfig.model_validate(spec)
    known = {
        n: tuple(
            TimeIntervalConfig.model_validate({"name": n, "time_intervals": p}).time_intervals[i].to_period()
            for i in range(len(p))
        )
        for n, p in (intervals or {}).items()
    }
    cfg.use_time_intervals(known)
    return cfg.to_route()


def test_receiver_matchers_continue_and_alertname() -> None:
    root = _routes(
        {
            "receiver": "chat",
            "group_by": ["alertname"],
            "routes": [
                {"matchers": ['severity="critical"', 'run=~"exp.*"'], "receiver": "pager", "continue": True},
                {"matchers": ['alertname="loss_nan"'], "receiver": "ml"},
            ],
        }
    )
    table = Table(root)
    got = table.step(0.0, tr("loss_nan", FIRING, 0.0, run="exp1", severity="critical"))
    assert sorted(r for r, _, _ in got) == ["ml", "pager"]  # continue: the next sibling is tried too
    assert table.last is not None and table.last.notifications[0].group_labels == (("alertname", "loss_nan"),)
    got = table.step(1.0, tr("grad_spike", FIRING, 1.0, run="old1", severity="critical"))
    assert [r for r, _, _ in got] == ["chat"]  # no child matches: the root's receiver


def test_receiver_and_receivers_together_is_an_error() -> None:
    with pytest.raises(ValidationError, match="not both"):
        RouteConfig.model_validate({"receiver": "a", "receivers": ["b"]})


NIGHTS = {"nights": [{"times": [{"start_time": "22:00", "end_time": "24:00"}]}]}
NIGHT = at("2026-03-02T22:00:00")


def test_a_muted_route_sends_at_its_first_flush_after_the_mute() -> None:
    root = _routes(
        {
            "receiver": "chat",
            "group_interval": "5m",
            "routes": [{"receiver": "pager", "mute_time_intervals": ["nights"]}],
        },
        NIGHTS,
    )
    table = Table(root)
    assert table.step(NIGHT, tr("loss_nan", FIRING, NIGHT)) == []
    assert table.last is not None and [(s.reason, s.by) for s in table.last.suppressed] == [
        ("muted", "mute_time_intervals nights")
    ]
    last_inside = NIGHT + 7200 - 300  # 23:55, a group_interval flush
    assert table.step(last_inside) == []
    got = table.step(last_inside + 300)  # 00:00: the end is exclusive, the next flush sends
    assert [r for r, s, _ in got] == ["pager"]


def test_a_resolution_during_a_mute_is_not_announced() -> None:
    root = _routes({"receiver": "chat", "routes": [{"receiver": "pager", "mute_time_intervals": ["nights"]}]}, NIGHTS)
    table = Table(root)
    day = NIGHT - 3600
    assert [r for r, _, _ in table.step(day, tr("loss_nan", FIRING, day))] == ["pager"]
    assert table.step(NIGHT, tr("loss_nan", RESOLVED, NIGHT)) == []  # as Alertmanager: dropped, not postponed
    assert table.step(NIGHT + 3 * 3600) == []


def test_active_intervals_send_only_inside() -> None:
    root = _routes({"receiver": "chat", "routes": [{"receiver": "pager", "active_time_intervals": ["nights"]}]}, NIGHTS)
    table = Table(root)
    day = NIGHT - 3600
    assert table.step(day, tr("loss_nan", FIRING, day)) == []
    assert table.last is not None and table.last.suppressed[0].by == "active_time_intervals nights"
    assert [r for r, _, _ in table.step(NIGHT)] == ["pager"]


def test_inhibit_rules_take_alertmanagers_matchers_and_alertname() -> None:
    rule = InhibitRuleConfig.model_validate(
        {"source_matchers": ['alertname="loss_nan"'], "target_matchers": ['alertname=~"lr_.*"'], "equal": ["run"]}
    ).to_rule()
    root = _routes({"receiver": "chat", "group_by": ["alertname", "run"]})
    table = Table(root, inhibit_rules=[rule])
    got = table.step(0.0, tr("loss_nan", FIRING, 0.0, run="a"), tr("lr_spike", FIRING, 0.0, run="a"))
    assert [items for _, _, items in got] == [("loss_nan/a:firing",)]  # lr_spike of run a is inhibited
    got = table.step(1.0, tr("lr_spike", FIRING, 1.0, run="b"))
    assert [items for _, _, items in got] == [("lr_spike/b:firing",)]  # another run: not inhibited


BAD_RULES = """\
notifiers:
  chat: {type: log}
time_intervals:
  - name: nights
    time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}]}]
  - name: nights
    time_intervals: [{weekdays: [saturday]}]
route:
  receiver: chat
  mute_time_intervals: [nights]
  routes:
    - matchers: ['severity="critical"']
      receiver: pager
      active_time_intervals: [weekends]
    - matchers: ['run=~"(exp"']
      receiver: chat
rules:
  - {name: loss_nan, metric: train/loss, condition: nonfinite}
"""


def test_config_errors_name_their_places(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(BAD_RULES)
    with pytest.raises(ConfigError) as err:
        load_config([str(path)])
    got = {(p.place, p.message.split(":")[0]) for p in err.value.problems}
    assert ("route.routes[1].matchers", "matchers[0]") in got  # the bad regex stops the rest of the route's checks
    path.write_text(BAD_RULES.replace("(exp", "exp"))
    with pytest.raises(ConfigError) as err:
        load_config([str(path)])
    assert sorted((p.place, p.message) for p in err.value.problems) == [
        ("route.mute_time_intervals", "the root route can't have mute_time_intervals: give them to a child route"),
        ("route.routes[0].active_time_intervals[0]", "no time interval named 'weekends' (defined: nights)"),
        ("route.routes[0].receiver", "no notifier named 'pager' (defined: chat)"),
        ("time_intervals[1].name", "time interval 'nights' is defined twice"),
    ]
