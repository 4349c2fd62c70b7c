"""Time tables for routing (match, match_re, continue, inherited defaults), inhibition and silences."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from alertd.dispatch.matchers import Matcher, MatchOp, Silence
from alertd.dispatch.route_config import RouteConfig

from .helpers import FIRING, RESOLVED, Table, inhibit, route, tr

TREE = {
    "receivers": ["console"],
    "group_wait": "0s",
    "routes": [
        {"match": {"severity": "critical"}, "receivers": ["pager"], "continue": True},
        {"match_re": {"run": "exp.*"}, "receivers": ["chat"], "group_wait": "20s"},
        {"match": {"alertname": "gpu_hot"}, "receivers": ["ops"]},
    ],
}


def test_match_continue_and_fallback_to_the_parent() -> None:
    t = Table(route(TREE))
    got = t.step(
        0.0,
        tr("nan", FIRING, 0.0, severity="critical", run="prod1"),  # pager, continues, no other child: pager only
        tr("grad", FIRING, 0.0, run="other"),  # no child matches: the root's console
        tr("gpu_hot", FIRING, 0.0, run="x"),  # alertname = rule
    )
    assert got == [
        ("console", "firing", ("grad/other:firing",)),
        ("ops", "firing", ("gpu_hot/x:firing",)),
        ("pager", "firing", ("nan/prod1:firing",)),
    ]


def test_continue_reaches_the_next_matching_sibling_with_its_own_timing() -> None:
    t = Table(route(TREE))
    t.run(
        [
            (
                0.0,
                [tr("nan", FIRING, 0.0, severity="critical", run="exp7")],
                [("pager", "firing", ("nan/exp7:firing",))],
            ),
            (19.0, [], []),
            (20.0, [], [("chat", "firing", ("nan/exp7:firing",))]),
        ]
    )


def test_match_re_is_anchored() -> None:
    t = Table(route(TREE))
    # `old-exp1` contains `exp` but does not match `exp.*` as a whole
    assert t.step(0.0, tr("grad", FIRING, 0.0, run="old-exp1")) == [("console", "firing", ("grad/old-exp1:firing",))]


def test_nested_routes_inherit_unset_values() -> None:
    root = route(
        {
            "receivers": ["a"],
            "group_wait": "10s",
            "repeat_interval": "2h",
            "send_resolved": False,
            "routes": [
                {
                    "match": {"source": "tb"},
                    "group_by": ["rule"],
                    "routes": [{"match": {"severity": "critical"}, "receivers": ["b"], "group_wait": "0s"}],
                }
            ],
        }
    )
    child = root.children[0]
    grandchild = child.children[0]
    assert (child.receivers, child.group_wait, child.repeat_interval, child.send_resolved) == (
        ("a",),
        10.0,
        7200.0,
        False,
    )
    assert (grandchild.receivers, grandchild.group_by, grandchild.group_wait, grandchild.repeat_interval) == (
        ("b",),
        ("rule",),
        0.0,
        7200.0,
    )
    bare = route({"receivers": ["x"]})
    assert (
        bare.group_by,
        bare.group_wait,
        bare.group_interval,
        bare.repeat_interval,
        bare.send_resolved,
    ) == (
        ("rule", "run"),
        0.0,
        60.0,
        14400.0,
        True,
    )


def test_bad_regex_in_config_names_the_label() -> None:
    with pytest.raises(ValidationError, match=r"run: invalid regex .exp\(.: missing \)"):
        RouteConfig.model_validate({"routes": [{"match_re": {"run": "exp("}}]})


def test_rule_notify_list_bypasses_the_route_with_root_timing() -> None:
    t = Table(route({"receivers": ["console"], "group_wait": "5s", "routes": [{"receivers": ["chat"]}]}))
    t.run(
        [
            (0.0, [tr("nan", FIRING, 0.0, notify=("stop", "chat"))], []),
            (5.0, [], [("chat", "firing", ("nan/r1:firing",)), ("stop", "firing", ("nan/r1:firing",))]),
        ]
    )


def test_alert_with_no_receiver_is_reported_unrouted() -> None:
    t = Table(route({"routes": [{"match": {"severity": "critical"}, "receivers": ["pager"]}]}))
    assert t.step(0.0, tr("grad", FIRING, 0.0)) == []
    assert t.last is not None
    assert [(s.rule, s.reason) for s in t.last.suppressed] == [("grad", "unrouted")]


INHIBIT = {
    "source_match": {"severity": "critical"},
    "target_match": {"severity": "warning"},
    "equal": ["run"],
}


def test_critical_alert_mutes_warnings_of_the_same_run_only() -> None:
    t = Table(route({"receivers": ["c"], "group_by": ["run"]}), inhibit_rules=[inhibit(INHIBIT)])
    crit = tr("nan", FIRING, 0.0, severity="critical", run="a")
    t.run(
        [
            (
                0.0,
                [crit, tr("spike", FIRING, 0.0, run="a"), tr("spike", FIRING, 0.0, run="b")],
                [
                    ("c", "firing", ("nan/a:firing",)),
                    ("c", "firing", ("spike/b:firing",)),
                ],
            ),
        ]
    )
    assert t.last is not None
    (muted,) = t.last.suppressed
    assert (muted.rule, dict(muted.labels)["run"], muted.reason, muted.by) == (
        "spike",
        "a",
        "inhibited",
        crit.fingerprint,
    )
    # once the critical alert resolves the warning is no longer muted and goes out at the next flush
    t.run(
        [
            (30.0, [tr("nan", RESOLVED, 30.0, severity="critical", run="a")], []),
            (60.0, [], [("c", "firing", ("nan/a:resolved", "spike/a:firing"))]),
        ]
    )


def test_equal_labels_missing_on_both_sides_count_as_equal() -> None:
    rule = inhibit({"source_match": {"rule": "nan"}, "target_match": {"rule": "spike"}, "equal": ["gpu"]})
    t = Table(route({"receivers": ["c"]}), inhibit_rules=[rule])
    got = t.step(0.0, tr("nan", FIRING, 0.0, run="a"), tr("spike", FIRING, 0.0, run="b"))
    assert got == [("c", "firing", ("nan/a:firing",))]
    other = Table(route({"receivers": ["c"]}), inhibit_rules=[rule])
    got = other.step(0.0, tr("nan", FIRING, 0.0, gpu="0"), tr("spike", FIRING, 0.0, gpu="1"))
    assert len(got) == 2


def test_alert_matching_both_sides_does_not_inhibit_itself() -> None:
    rule = inhibit({"source_match_re": {"rule": ".*"}, "target_match_re": {"rule": ".*"}})
    t = Table(route({"receivers": ["c"]}), inhibit_rules=[rule])
    assert t.step(0.0, tr("nan", FIRING, 0.0)) == [("c", "firing", ("nan/r1:firing",))]


def test_silence_mutes_matching_alerts_until_it_expires() -> None:
    sil = Silence(
        "s1",
        (Matcher("run", MatchOp.RE, "exp.*"), Matcher("severity", MatchOp.NE, "critical")),
        starts_at=0.0,
        ends_at=100.0,
        created_by="me",
        comment="known flaky",
    )
    t = Table(route({"receivers": ["c"]}), silences=[sil])
    t.run(
        [
            (
                0.0,
                [
                    tr("spike", FIRING, 0.0, run="exp1"),
                    tr("nan", FIRING, 0.0, run="exp1", severity="critical"),
                ],
                [("c", "firing", ("nan/exp1:firing",))],
            ),
            (60.0, [], []),
            (120.0, [], [("c", "firing", ("spike/exp1:firing",))]),
        ]
    )


def test_silence_reports_its_id_and_not_yet_started_silence_mutes_nothing() -> None:
    later = Silence("s2", (Matcher.parse('rule="spike"'),), starts_at=50.0, ends_at=100.0)
    t = Table(route({"receivers": ["c"]}), silences=[later])
    assert t.step(0.0, tr("spike", FIRING, 0.0)) == [("c", "firing", ("spike/r1:firing",))]
    t2 = Table(route({"receivers": ["c"]}), silences=[later])
    assert t2.step(50.0, tr("spike", FIRING, 50.0)) == []
    assert t2.last is not None
    assert [(s.reason, s.by) for s in t2.last.suppressed] == [("silenced", "s2")]


@pytest.mark.parametrize(
    ("text", "labels", "hit"),
    [
        ('run="a"', {"run": "a"}, True),
        ("run=a", {"run": "b"}, False),
        ('team!="ml"', {}, True),
        ('run=~"exp[0-9]+"', {"run": "exp12"}, True),
        ('run=~"exp[0-9]+"', {"run": "xexp12"}, False),
        ('run!~"exp.*"', {"run": "prod"}, True),
        (r'summary="say \"hi\""', {"summary": 'say "hi"'}, True),
    ],
)
def test_matcher_parse_and_match(text: str, labels: dict[str, str], hit: bool) -> None:
    m = Matcher.parse(text)
    assert m.matches(labels) is hit
    assert Matcher.parse(str(m)) == m


def test_bad_matchers_and_silences_are_errors() -> None:
    with pytest.raises(ValueError, match="expected a matcher"):
        Matcher.parse("no operator")
    with pytest.raises(ValueError, match="invalid regex"):
        Matcher.parse('run=~"("')
    with pytest.raises(ValueError, match="ends_at"):
        Silence("s", (Matcher.parse("a=b"),), starts_at=10.0, ends_at=5.0)
    with pytest.raises(ValueError, match="at least one matcher"):
        Silence("s", (), starts_at=0.0, ends_at=5.0)
