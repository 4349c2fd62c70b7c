"""The service's chain parks its quiet pairs and judges them column-wise (`alertd.rules.parking`): it gives the
transitions, tracks, active pairs and timers of a chain that steps every pair, whatever the ticks bring."""

from __future__ import annotations

import math

from core_helpers import rule
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.inbox import KEPT_ROWS
from alertd.model import Sample, SeriesKey
from alertd.rules import RuleSet
from alertd.rules.carry import carry_over
from alertd.rules.evaluate import AlertMemo, EvalState, evaluate
from alertd.rules.parking import ParkedTracks
from alertd.rules.state import Track

RULES = [
    rule("{name: nf, metric: loss, condition: nonfinite}"),
    rule("{name: hi, metric: loss, condition: '> 8', for: 25s, keep_firing_for: 15s}"),
    rule("{name: lo, metric: [loss, acc], condition: '<= 1', consecutive: 2}"),
    rule("{name: eq, metric: acc, condition: '== 5'}"),
    rule("{name: ne, metric: acc, condition: '!= 5', consecutive: 4}"),
    rule("{name: up, metric: [loss, acc], condition: increasing, consecutive: 3}"),
    rule("{name: down, metric: acc, condition: {decreasing: {min_delta: 0.5}}, consecutive: 2}"),
    rule("{name: sp, metric: loss, condition: {spike: {ratio: 2, baseline: 4 samples, min_samples: 2}}}"),
    rule("{name: drop, metric: acc, condition: {spike: {ratio: 0.5, direction: down, baseline: 30s, min_samples: 1}}}"),
    rule("{name: gone, metric: [loss, acc], condition: {absent: 35s}}"),
    rule("{name: avg, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 8}}"),
    rule("{name: q, metric: acc, condition: {quantile: {over: 30s, q: 0.2}, op: '<=', value: 1}}"),
    rule("{name: sum, metric: loss, condition: {sum: {over: 3 samples}, op: '>', value: 20}}"),
    rule("{name: div, metric: loss, condition: {avg: {over: 2 samples, baseline: 3 samples}, op: '>', ratio: 1.5}}"),
    rule("{name: fall, metric: acc, condition: {max: {over: 2 samples, baseline: 2 samples}, op: '<', ratio: 0.5}}"),
]
"""Parked rules (thresholds, nonfinite, trends, quiet or steadily firing; spikes over a median and windows (an avg, a
quantile; an avg and a max against their baselines) of samples and of seconds, up and down, absences, quiet; `for`,
`keep_firing_for`, `consecutive`) beside a rule that never is (a sum), on one metric, and on another with parked rules
only (`acc`: its series are passed by)."""

values = st.one_of(
    st.just(None),  # the series' value before again: steady alerts, quiet or firing
    st.sampled_from([0.5, 1.0, 5.0, 5.0, 5.0, 9.0]),
    st.floats(0, 10),
    st.sampled_from([math.nan, math.inf]),
)
# a tick: for each of four series, 0, 1 or 2 samples (value, step back?, time back?); whether to read the tracks; the
# time it moves on by; a run that ends or goes on (`run.finished` 1 or 0), or none
sample = st.tuples(values, st.integers(0, 12), st.integers(0, 9))
ends = st.sampled_from([None, None, None, ("a", 1.0), ("b", 1.0), ("a", 0.0), ("b", 0.0)])
per_series = st.one_of(st.lists(sample, max_size=2), st.lists(sample, min_size=1, max_size=1))  # mostly one
tick = st.tuples(st.lists(per_series, min_size=4, max_size=4), st.booleans(), st.integers(1, 30), ends)
KEYS = [SeriesKey(m, (("run", r),)) for m in ("loss", "acc") for r in ("a", "b")]


def fields(state: EvalState) -> dict[object, dict[str, str]]:
    return {p: {f: repr(getattr(tr, f)) for f in Track.FIELDS} for p, tr in state.tracks.items()}


@settings(max_examples=200, deadline=None)
@given(
    ticks=st.lists(tick, min_size=1, max_size=40),
    limit=st.sampled_from([3, 64]),
    room=st.sampled_from([3, 99]),
    reload=st.integers(0, 60),
)
def test_a_chain_that_parks_gives_what_a_chain_that_steps_every_pair_gives(ticks, limit, room, reload) -> None:  # type: ignore[no-untyped-def]
    """Samples one by one and several at once, steps going back (a restart), times going back, NaN and Inf, a buffer
    of 3 samples (evictions down to the newest, by age too), room for 3 series of 4 (one idle a minute forgotten
    for a new one, its slot given again), runs that end and go on, the tracks read now and then (settled) or not, the
    rules reloaded midway (`carry_over`: the parked tracks and timers carried, settled, to a new rule set)."""
    ruleset = RuleSet(RULES)
    chains, memos = [], (AlertMemo(), AlertMemo())
    for park in (True, False):
        buffer = SeriesBuffer(BufferLimits(max_samples=limit, max_age=40.0, max_series=room))
        chains.append((park, buffer, [EvalState()]))
    t, steps, last = 0.0, [0] * len(KEYS), [5.0] * len(KEYS)
    for k, (per_series, read, gap, end) in enumerate(ticks):
        t += gap
        batch = [] if end is None else [Sample(SeriesKey("run.finished", (("run", end[0]),)), t, None, end[1])]
        for i, drawn in enumerate(per_series):
            for value, back, late in drawn:
                steps[i] = steps[i] - back if back > 9 else steps[i] + 1  # now and then a step back: a restart
                last[i] = last[i] if value is None else value
                batch.append(Sample(KEYS[i], t - late if late > 6 else t, steps[i], last[i]))
        got = []
        if k == reload:
            reloaded = RuleSet(RULES)
            for _, buffer, states in chains:
                states[0] = carry_over(states[0], ruleset, reloaded, buffer)[0]
            ruleset = reloaded
        for park, buffer, states in chains:
            buffer.append(batch, t)
            if k % 11 == 10:
                buffer.evict_all(t + 45)  # idle series evicted by age down to their newest
            ev = evaluate(ruleset, buffer, t, states[0], in_place=True, park=park)
            states[0] = ev.state
            got.append(([(x.time, x.rule, x.state, x.labels, x.value, x.step) for x in ev.transitions], ev.errors))
        assert repr(got[0]) == repr(got[1])
        if read or k == len(ticks) - 1:
            parked, stepped = chains[0][2][0], chains[1][2][0]
            got, want = fields(parked), fields(stepped)
            assert got.keys() == want.keys()
            assert [(p, f, v, want[p][f]) for p in got for f, v in got[p].items() if v != want[p][f]] == []
            assert parked.active_pairs() == stepped.active_pairs()
            assert dict(parked.timers) == dict(stepped.timers)
        if read or k % 3 == 0:  # the alerts as the service makes them (a memo kept between calls)
            alerts = [repr(chain[2][0].alerts(ruleset.rules, memo)) for chain, memo in zip(chains, memos, strict=True)]
            assert alerts[0] == alerts[1]
    assert isinstance(chains[0][2][0].tracks, ParkedTracks)


def test_quiet_pairs_are_parked_and_a_series_whose_pairs_all_are_is_passed_by() -> None:
    """A steady `acc` (parked rules only) is no longer visited; a value that breaks a threshold is seen at once, its
    alert made as every pair's, and the firing pair parked again at once (it stays firing while its condition holds)."""
    rules = RuleSet(
        [rule("{name: big, metric: acc, condition: '> 8'}"), rule("{name: nf, metric: acc, condition: nonfinite}")]
    )
    key = SeriesKey("acc", (("run", "a"),))
    buffer = SeriesBuffer()
    state = EvalState()
    for t in range(5):
        buffer.append([Sample(key, float(t), t, 5.0)], float(t))
        state = evaluate(rules, buffer, float(t), state, in_place=True, park=True).state
    parking = state.parking
    assert parking is not None
    series = buffer.get(key)
    assert series is not None
    assert parking.settled[series.slot]  # both pairs parked: the tick passes the series by
    assert state.written == frozenset()  # the note of a parked pair is not a write ...
    assert state.take_parked() == {("big", key), ("nf", key)}  # ... but a save is told
    assert state.tracks[("big", key)].position == 5 and state.tracks[("big", key)].time == 4.0  # settled as read
    buffer.append([Sample(key, 5.0, 5, 9.5)], 5.0)
    ev = evaluate(rules, buffer, 5.0, state, in_place=True, park=True)
    assert [(x.rule, x.state.value, x.value) for x in ev.transitions] == [("big", "firing", 9.5)]
    assert parking.settled[series.slot] and parking.cols[0].firing[series.slot]  # firing, parked at once
    buffer.append([Sample(key, 6.0, 6, math.nan)], 6.0)
    ev = evaluate(rules, buffer, 6.0, ev.state, in_place=True, park=True)
    assert sorted((x.rule, x.state.value) for x in ev.transitions) == [("big", "resolved"), ("nf", "firing")]


def test_a_series_forgotten_at_the_series_limit_and_back_is_judged_again() -> None:
    """Room for one series: `a` (its pairs parked) gives its place to `b`, idle a minute, then comes back and breaks
    its threshold: the alert fires, as in a chain that steps every pair (its slot went to `b` in between)."""
    rules = RuleSet([rule("{name: big, metric: acc, condition: '> 8'}")])
    a, b = (SeriesKey("acc", (("run", r),)) for r in "ab")
    feed = [(a, 0.0, 1.0), (a, 1.0, 1.0), (a, 2.0, 1.0), (b, 70.0, 1.0), (b, 71.0, 1.0), (b, 72.0, 1.0)]
    feed += [(a, 140.0, 9.0), (a, 141.0, 1.0)]
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(BufferLimits(max_series=1)), EvalState(), []
        for key, t, v in feed:
            buffer.append([Sample(key, t, int(t), v)], t)
            ev = evaluate(rules, buffer, t, state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time, dict(x.labels)["run"]) for x in ev.transitions]
        seen.append(out)
    assert seen[0] == seen[1] == [("big", "firing", 140.0, "a"), ("big", "resolved", 141.0, "a")]


def chains(rules: RuleSet, feed: list[tuple[float, float]], key: SeriesKey) -> list[list[tuple[str, str, float]]]:
    """The transitions of a chain that parks and of one that steps every pair, one sample (time, value) a tick."""
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(), EvalState(), []
        for step, (t, v) in enumerate(feed):
            buffer.append([Sample(key, t, step, v)], max(t, 100.0))
            ev = evaluate(rules, buffer, max(t, 100.0), state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time) for x in ev.transitions]
        seen.append(out)
    return seen


def test_a_parked_spike_takes_in_the_values_it_notes() -> None:
    """Parked over 5s, the loss falls to 1s (no spike: their bound, the least value, falls with them); 2.5 is then a
    spike over the median of 1s, though not over the 5s the pair was parked with."""
    rules = RuleSet([rule("{name: sp, metric: loss, condition: {spike: {ratio: 2, baseline: 4 samples}}}")])
    feed = [(float(t), 5.0) for t in range(8)] + [(float(t), 1.0) for t in range(8, 16)] + [(16.0, 2.5)]
    parked, stepped = chains(rules, feed, SeriesKey("loss", (("run", "a"),)))
    assert parked == stepped == [("sp", "firing", 16.0)]


def test_a_parked_spike_over_seconds_is_handed_back_when_time_goes_back() -> None:
    """A drop over 30 s, parked over 10s (its bound: 10); a 6 back in time, among 100s, is a drop below half their
    median, though not below half the bound."""
    drop = "{spike: {ratio: 0.5, direction: down, baseline: 30s, min_samples: 1}}"
    rules = RuleSet([rule(f"{{name: drop, metric: tps, condition: {drop}}}")])
    feed = [(0.0, 100.0), (1.0, 100.0), (2.0, 100.0), (40.0, 10.0), (41.0, 10.0), (42.0, 10.0), (5.0, 6.0)]
    parked, stepped = chains(rules, feed, SeriesKey("tps", (("run", "a"),)))
    assert stepped and stepped[0][:2] == ("drop", "firing")
    assert parked == stepped


def test_a_parked_trend_whose_sample_before_was_evicted_compares_with_nothing() -> None:
    """An eviction by age between the append and the tick leaves the newest sample alone: no rise to judge (the first
    sample of a series is none), though it is above the value the parked pair saw before it."""
    rules = RuleSet([rule("{name: up, metric: acc, condition: increasing}")])
    key = SeriesKey("acc", (("run", "a"),))
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(BufferLimits(max_age=40.0)), EvalState(), []
        for t, v in [(0.0, 0.5), (1.0, 0.5), (2.0, 0.5), (3.0, 1.0), (4.0, 2.0)]:
            buffer.append([Sample(key, t, int(t), v)], t)
            if t == 3.0:
                buffer.evict_all(t + 41)
            ev = evaluate(rules, buffer, t, state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time) for x in ev.transitions]
        seen.append(out)
    assert seen[0] == seen[1] == [("up", "firing", 4.0)]


def test_a_steadily_firing_pair_is_parked_its_alert_read_as_it_stands() -> None:
    """A threshold firing at every sample is parked: its alert (made as the service makes it, a memo kept between
    calls) shows the newest value and step; the run's end resolves it, a value back in range too."""
    rules = RuleSet([rule("{name: big, metric: acc, condition: '> 8'}")])
    memo = AlertMemo()
    key, done = SeriesKey("acc", (("run", "a"),)), SeriesKey("run.finished", (("run", "a"),))
    buffer, state = SeriesBuffer(), EvalState()
    for t in range(6):
        buffer.append([Sample(key, float(t), t, 9.0 + t)], float(t))
        state = evaluate(rules, buffer, float(t), state, in_place=True, park=True).state
        assert [(a.state.value, a.value, a.step) for a in state.alerts(rules.rules, memo)] == [("firing", 9.0 + t, t)]
    assert state.parking is not None and state.parking.cols[0].count == 1  # parked, firing
    buffer.append([Sample(done, 6.0, None, 1.0)], 6.0)
    ev = evaluate(rules, buffer, 6.0, state, in_place=True, park=True)
    assert [(x.rule, x.state.value, x.time, x.value) for x in ev.transitions] == [("big", "resolved", 6.0, 14.0)]
    assert ev.state.alerts(rules.rules, memo) == []


def test_a_parked_window_is_judged_when_a_nan_fills_it() -> None:
    """An avg over 3 samples: 9 then two NaNs. The NaNs move no value into the window, but the second fills it: the avg
    of its one finite value, 9, is over 8."""
    rules = RuleSet([rule("{name: avg, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 8}}")])
    feed = [(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 9.0), (5.0, math.nan), (6.0, math.nan)]
    parked, stepped = chains(rules, feed, SeriesKey("loss", (("run", "a"),)))
    assert parked == stepped == [("avg", "firing", 6.0)]


def test_a_firing_pair_whose_run_ends_later_is_not_parked() -> None:
    """The run says it finished 10 s ahead of the tick's clock: the firing alert resolves then (a time-based change
    due), and goes on firing on samples till then, as in a chain that steps every pair."""
    rules = RuleSet([rule("{name: big, metric: acc, condition: '> 8'}")])
    key, done = SeriesKey("acc", (("run", "a"),)), SeriesKey("run.finished", (("run", "a"),))
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(), EvalState(), []
        feed = [[Sample(key, 0.0, 0, 9.0)], [Sample(key, 1.0, 1, 9.0), Sample(done, 11.0, None, 1.0)]]
        feed += [[Sample(key, float(t), t, 9.0)] for t in range(2, 14)]
        for t, batch in enumerate(feed):
            buffer.append(batch, float(t))
            ev = evaluate(rules, buffer, float(t), state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time) for x in ev.transitions]
        seen.append(out)
    assert seen[0] == seen[1]
    assert seen[1][:2] == [("big", "firing", 0.0), ("big", "resolved", 11.0)]


def test_an_absence_whose_run_ended_is_not_parked() -> None:
    """The run ends at 40 s (said at once, a time ahead): an absence of 35 s after a sample at 6 s would begin after
    the end, so none is timed; the samples before 5 s time one (before the end). The timers and transitions are
    those of a chain that steps every pair."""
    rules = RuleSet([rule("{name: gone, metric: loss, condition: {absent: 35s}}")])
    key, done = SeriesKey("loss", (("run", "a"),)), SeriesKey("run.finished", (("run", "a"),))
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(), EvalState(), []
        for t in range(9):
            batch = [Sample(key, float(t), t, 1.0)] + ([Sample(done, 40.0, None, 1.0)] if t == 2 else [])
            buffer.append(batch, float(t))
            ev = evaluate(rules, buffer, float(t), state, in_place=True, park=park)
            state = ev.state
            out.append((dict(state.timers), [(x.rule, x.state.value, x.time) for x in ev.transitions]))
        seen.append(out)
    assert seen[0] == seen[1]
    assert seen[1][8] == ({}, [])  # no absence timed after the run's end


def test_a_parked_window_against_its_baseline_takes_in_the_values_it_notes() -> None:
    """An avg over 2 samples against the 3 before, parked over 5s (its bounds: 5 and 5): 3.5s come (the baseline's
    bound falls to 3.5, the recent one stays 5: still short of 1.5x), then 7s: twice the 3.5s that fill the baseline
    by then, it fires, though 7 is short of 1.5 times the 5 it was parked with. A max falling below half its
    baseline's, the same way down."""
    over = "over: 2 samples, baseline: 3 samples"
    div = rule(f"{{name: div, metric: loss, condition: {{avg: {{{over}}}, op: '>', ratio: 1.5}}}}")
    feed = [(float(t), v) for t, v in enumerate([5.0] * 5 + [3.5] * 4 + [7.0] * 2)]
    parked, stepped = chains(RuleSet([div]), feed, SeriesKey("loss", (("run", "a"),)))
    assert parked == stepped == [("div", "firing", 10.0)]
    fall = rule(f"{{name: fall, metric: acc, condition: {{max: {{{over}}}, op: '<', ratio: 0.5}}}}")
    feed = [(float(t), v) for t, v in enumerate([2.0] * 5 + [3.0] * 4 + [1.4] * 2)]
    parked, stepped = chains(RuleSet([fall]), feed, SeriesKey("acc", (("run", "a"),)))
    assert parked == stepped == [("fall", "firing", 10.0)]


def test_the_inbox_keeps_about_two_ticks_of_rows() -> None:
    """Thousands of ticks of one series: the inbox is cleared as it fills (its chain has read the rows), and the chain
    goes on parked, its alert seen at once."""
    rules = RuleSet([rule("{name: big, metric: acc, condition: '> 8'}")])
    key = SeriesKey("acc", (("run", "a"),))
    buffer, state, most = SeriesBuffer(), EvalState(), 0
    for t in range(2 * KEPT_ROWS + 10):
        buffer.append([Sample(key, float(t), t, 1.0)], float(t))
        state = evaluate(rules, buffer, float(t), state, in_place=True, park=True).state
        assert buffer.inbox is not None
        most = max(most, len(buffer.inbox))
    assert most == KEPT_ROWS + 1
    assert state.parking is not None and state.parking.cols[0].count == 1
    t = 2 * KEPT_ROWS + 10
    buffer.append([Sample(key, float(t), t, 9.0)], float(t))
    ev = evaluate(rules, buffer, float(t), state, in_place=True, park=True)
    assert [(x.rule, x.state.value) for x in ev.transitions] == [("big", "firing")]


def test_a_pair_firing_after_its_run_ended_is_not_parked() -> None:
    """The run ended at 2 s; a NaN at 3 s fires again; a NaN back at -3 s, before the end, resolves it at the end, as
    in a chain that steps every pair (a firing pair of an ended run is never steady)."""
    rules = RuleSet([rule("{name: nf, metric: loss, condition: nonfinite}")])
    key, done = SeriesKey("loss", (("run", "b"),)), SeriesKey("run.finished", (("run", "b"),))
    feed = [[Sample(done, 2.0, None, 1.0)], [Sample(key, 3.0, 1, math.nan)], [Sample(key, -3.0, 2, math.nan)]]
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(), EvalState(), []
        for t, batch in zip((2.0, 3.0, 4.0), feed, strict=True):
            buffer.append(batch, t)
            ev = evaluate(rules, buffer, t, state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time) for x in ev.transitions]
        seen.append(out)
    assert seen[0] == seen[1] == [("nf", "firing", 3.0), ("nf", "resolved", 2.0)]


def test_a_parked_trend_whose_sample_before_an_append_was_evicted_compares_with_nothing() -> None:
    """Two samples in one append, 41 s after the one before, which the age limit (40 s) then evicts: the first of
    the two has nothing before it (no fall from 5 to 1), the second falls from 1 to 0: one in a row, no alert."""
    rules = RuleSet([rule("{name: down, metric: acc, condition: {decreasing: {min_delta: 0.5}}, consecutive: 2}")])
    key = SeriesKey("acc", (("run", "a"),))
    both = [Sample(key, 42.0, 2, 1.0), Sample(key, 42.0, 3, 0.0)]
    feed = [(1.0, [Sample(key, 1.0, 1, 5.0)]), (6.0, []), (42.0, both)]
    seen = []
    for park in (True, False):
        buffer, state, out = SeriesBuffer(BufferLimits(max_age=40.0)), EvalState(), []
        for t, batch in feed:
            buffer.append(batch, t)
            ev = evaluate(rules, buffer, t, state, in_place=True, park=park)
            state = ev.state
            out += [(x.rule, x.state.value, x.time) for x in ev.transitions]
        seen.append(out)
    assert seen[0] == seen[1] == []
