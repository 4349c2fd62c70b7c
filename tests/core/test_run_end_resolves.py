"""The alerts of a run that has ended resolve; a new run under the same name is a new incident. Time tables,
through the replay (the run tracker included), as the service and dry-run evaluate."""

from __future__ import annotations

from core_helpers import NAN, rule, samples, series, table

from alertd.dryrun import Replay
from alertd.model import Sample, shown_annotations
from alertd.rules import RuleSet

NF = "{name: nf, metric: loss, condition: nonfinite}"
CRASHED = "{name: crashed, metric: run.end, labels_match: {reason: crashed}, condition: '> 0'}"


def finished(t: float, run: str = "r1") -> Sample:
    return Sample(series("run.finished", run=run, source="s"), t, None, 1.0)


def crashed(t: float, run: str = "r1") -> list[Sample]:
    return [
        Sample(series("run.crashed", run=run, source="s"), t, None, 1.0),
        Sample(series("run.finished", run=run, source="s"), t, None, 1.0),
    ]


def test_a_nan_alert_resolves_when_its_run_ends() -> None:
    loss = series("loss", run="r1", source="s")
    data = [*samples(loss, [1.0, NAN]), finished(25.0)]
    assert table([rule(NF)], data) == [(10.0, "nf", "firing"), (25.0, "nf", "resolved")]


def test_another_run_ending_resolves_nothing() -> None:
    loss = series("loss", run="r1", source="s")
    data = [*samples(loss, [1.0, NAN]), finished(25.0, run="r2")]
    assert table([rule(NF)], data) == [(10.0, "nf", "firing")]


def test_pending_for_ends_inactive_at_the_run_end() -> None:
    loss = series("loss", run="r1", source="s")
    data = [*samples(loss, [1.0, NAN]), finished(25.0)]
    assert table([rule("{name: nf, metric: loss, condition: nonfinite, for: 1m}")], data) == [
        (10.0, "nf", "pending"),
        (25.0, "nf", "inactive"),
    ]


def test_the_end_s_own_alert_stays_until_the_run_starts_again() -> None:
    # run_crashed is about the end: the end does not resolve it; the relaunch under the same name does, and
    # the relaunched run's first NaN fires again at once: a new incident.
    loss = series("loss", run="r1", source="s")
    data = [*samples(loss, [1.0, NAN]), *crashed(25.0), *samples(loss, [2.0, NAN], start=100.0)]
    got = table([rule(NF), rule(CRASHED)], data, until=1000.0)
    assert got == [
        (10.0, "nf", "firing"),
        (25.0, "crashed", "firing"),
        (25.0, "nf", "resolved"),
        (100.0, "crashed", "resolved"),
        (110.0, "nf", "firing"),
    ]


def test_an_absence_is_unchanged_it_stops_at_the_run_end() -> None:
    loss = series("loss", run="r1", source="s")
    data = [*samples(loss, [1.0, 2.0]), finished(100.0)]
    absent = rule("{name: quiet, metric: loss, condition: {absent: 30s}}")
    assert table([absent], data, until=500.0) == [(40.0, "quiet", "firing"), (100.0, "quiet", "resolved")]


def test_ranks_writing_side_by_side_do_not_resolve_each_other() -> None:
    # Another host (or pid) writing the same series is no end of the run: rank 0's NaN stays firing.
    a = series("loss", run="r1", source="s", host="n0")
    b = series("loss", run="r1", source="s", host="n1")
    data = [*samples(a, [NAN]), *samples(b, [1.0, 1.0], start=5.0)]
    assert table([rule(NF)], data) == [(0.0, "nf", "firing")]


def test_an_alert_ended_by_its_run_says_so_not_back_to() -> None:
    loss = series("loss", run="r1", source="s")
    replay = Replay(RuleSet([rule("{name: nf, metric: loss, condition: nonfinite, annotations: {summary: x}}")]))
    fired = replay.feed(samples(loss, [1.0, NAN])).transitions
    (resolved,) = replay.feed([finished(25.0)]).transitions
    assert [t.state.value for t in fired] == ["firing"] and resolved.state.value == "resolved"
    assert shown_annotations(resolved)["summary"] == "run r1 ended; loss was NaN at step 1"
    # a value that comes back resolves as before: "back to"
    replay = Replay(RuleSet([rule("{name: nf, metric: loss, condition: nonfinite, annotations: {summary: x}}")]))
    (_, resolved) = replay.feed(samples(loss, [NAN, 2.0])).transitions
    assert shown_annotations(resolved)["summary"] == "loss back to 2 at step 1"


def test_a_firing_alert_resolves_when_its_run_ends_in_the_tick_of_its_next_sample() -> None:
    # The service's tick: one more NaN on a firing pair, read with the run's end (a steadily firing pair is stepped
    # at once, but not past the end of its run).
    loss = series("loss", run="r1", source="s")
    replay = Replay(RuleSet([rule(NF)]))
    got = replay.feed(samples(loss, [1.0, NAN])).transitions
    got += replay.feed([*samples(loss, [NAN], start=20.0), finished(25.0)]).transitions
    got += replay.advance(100.0).transitions
    assert [(t.time, t.state.value) for t in got] == [(10.0, "firing"), (25.0, "resolved")]
