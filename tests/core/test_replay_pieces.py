"""The pieces a replay feeds between two evaluations (`alertd.replay_chunks`) change no answer: a replay gives the
transitions the samples give fed one at a time (the service with a poll per sample), where the rules' windows
reach far back into a small buffer, and a NaN just before a restart from a checkpoint is judged before the restart
drops it. The pieces themselves keep each series' share within what its rules leave of the buffer."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from functools import partial
from typing import Any

from core_helpers import rule
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd import dryrun
from alertd.buffer import BufferLimits
from alertd.dryrun import Replay
from alertd.model import Sample, SeriesKey, make_labels
from alertd.replay_chunks import MAX_PIECE, MIN_PIECE, floor, pieces, plan
from alertd.rules import RuleSet

FAR = [
    rule("{name: nf, metric: loss, condition: nonfinite}"),
    rule("{name: sp, metric: loss, condition: {spike: {ratio: 1.8, baseline: 40 samples, min_samples: 30}}}"),
    rule("{name: div, metric: loss, condition: {avg: {over: 8 samples, baseline: 30 samples}, op: '>', ratio: 1.3}}"),
    rule("{name: tp, metric: tps, condition: {spike: {ratio: 0.6, direction: down, baseline: 45s, min_samples: 5}}}"),
    rule("{name: z, metric: gn, condition: {zscore: {over: 35 samples, threshold: 3}}}"),
    rule("{name: up, metric: gn, condition: increasing, consecutive: 3}"),
    rule("{name: hot, metric: gn, condition: {avg: {over: 20s}, op: '>', value: 1.12}}"),
    rule("{name: tz, metric: tps, condition: {zscore: {over: 30s, threshold: 2.5}}}"),
]
"""Rules reading up to 40 samples back (`sp`), on a buffer of 56: a piece of more than 16 samples of `loss` would
leave its first samples' windows short (and more than 56 would leave samples unjudged)."""
LIMITS = BufferLimits(max_samples=56, max_age=1e9)


def key(metric: str, run: str = "r1") -> SeriesKey:
    return SeriesKey(metric, make_labels({"run": run}))


def stream(seed: int, n: int, restarts: bool) -> list[Sample]:
    """`n` samples of loss, tps (tokens/s) and gn (grad norm) of one or two runs, a sample every 0.25-1.5 s;
    now and then a spike, a dip, a NaN; with `restarts`, now and then a step going back (a restart)."""
    rnd = random.Random(seed)
    t, steps, out = 1.7e9, {"r1": 0, "r2": 0}, []
    for _ in range(n):
        run = rnd.choice(["r1", "r1", "r2"])
        metric = rnd.choice(["loss", "loss", "tps", "gn"])
        t += rnd.choice([0.25, 0.5, 1.0, 1.5])
        steps[run] += 1
        if restarts and rnd.random() < 0.01:
            steps[run] = max(0, steps[run] - rnd.randrange(1, 40))
        base = {"loss": 2.0, "tps": 4e4, "gn": 1.0}[metric]
        r = rnd.random()
        value = base * (3.0 if r < 0.03 else 0.3 if r < 0.06 else 1.0 + rnd.random() * 0.2)
        if r > 0.995:
            value = math.nan
        out.append(Sample(key(metric, run), t, steps[run], value))
    return out


def rows(transitions: Any) -> list[tuple[Any, ...]]:
    return [(t.time, t.rule, t.state.value, t.step, repr(t.value), t.labels) for t in transitions]


def one_at_a_time(ruleset: RuleSet, data: list[Sample], limits: BufferLimits) -> list[tuple[Any, ...]]:
    """The transitions with a feed (and an evaluation) per sample, as `dryrun.replay` ends a replay."""
    run = Replay(ruleset, limits)
    out = []
    for s in sorted(data, key=lambda x: x.time):
        out += rows(run.feed([s]).transitions)
    return out + rows(run.end().transitions)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 900))
def test_a_replay_in_pieces_is_the_replay_a_sample_at_a_time(seed: int, n: int) -> None:
    data = stream(seed, n, restarts=False)
    ruleset = RuleSet(FAR)
    assert rows(dryrun.replay(ruleset, data, LIMITS)) == one_at_a_time(ruleset, data, LIMITS)


def test_long_windows_in_a_small_buffer_are_judged_whole() -> None:
    # 600 samples: the pieces of a fixed 256 samples (before) left the first samples of each piece with windows cut
    # short by the buffer, and some of them unjudged; the replay now gives the answers of a sample at a time
    data = stream(11, 600, restarts=False)
    ruleset = RuleSet(FAR)
    want = one_at_a_time(ruleset, data, LIMITS)
    assert {r[1] for r in want} >= {"nf", "sp", "div", "tp", "z", "up", "hot", "tz"}  # every rule says something
    assert rows(dryrun.replay(ruleset, data, LIMITS)) == want


def test_a_nan_just_before_a_restart_from_a_checkpoint_is_judged() -> None:
    # steps 0..99, a NaN at step 99, the trainer restarts from step 60's checkpoint and goes on to step 299: the
    # restart drops steps 60..99 from the buffer; a piece holding both the NaN and the restart dropped it unjudged
    loss = key("loss")
    data = [Sample(loss, 1000.0 + i, i, math.nan if i == 99 else 2.0) for i in range(100)]
    data += [Sample(loss, 1100.0 + k, 60 + k, 2.0) for k in range(240)]
    ruleset = RuleSet([rule("{name: loss_not_finite, metric: loss, condition: nonfinite}")])
    got = [(t.rule, t.state.value, t.step) for t in dryrun.replay(ruleset, data)]
    assert got == [("loss_not_finite", "firing", 99), ("loss_not_finite", "resolved", 60)]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 3000),
    max_samples=st.sampled_from([8, 48, 300, 1024]),
    restarts=st.booleans(),
)
def test_each_series_share_of_a_piece_is_what_its_rules_leave_of_the_buffer(
    seed: int, n: int, max_samples: int, restarts: bool
) -> None:
    data = sorted(stream(seed, n, restarts), key=lambda s: s.time)
    limits = BufferLimits(max_samples=max_samples, max_age=1e9)
    ruleset = RuleSet(FAR)
    needs: dict[SeriesKey, int | None] = {}

    def lookback(k: SeriesKey, times: Any) -> int | None:
        needs[k] = dryrun.lookback(ruleset, k, times, max_samples)
        return needs[k]

    cut = list(pieces(data, lookback, limits))
    assert [a for a, _ in cut] == [0] + [b for _, b in cut[:-1]] and cut[-1][1] == len(data)
    for a, b in cut:
        assert 0 < b - a <= MAX_PIECE
        for k, count in Counter(s.series for s in data[a:b]).items():
            need = needs[k]
            room = max_samples - need if need is not None else 0
            assert count <= (room if room >= floor(limits) else floor(limits)), (k.metric, need, count)
            assert count <= max_samples
    last: dict[SeriesKey, int] = {}
    for i, s in enumerate(data):  # a step going back starts its piece (unless that piece would be too short)
        if s.step < last.get(s.series, -1):
            a, b = next((a, b) for a, b in cut if a <= i < b)
            assert i == a or i - a < MIN_PIECE
        last[s.series] = s.step


def test_a_rule_that_does_not_say_how_far_back_it_reads_gets_the_smallest_pieces() -> None:
    ruleset = RuleSet([rule("{name: e, condition: {expr: 'loss > 3'}}")])
    data = stream(5, 2000, restarts=False)
    ordered = sorted(data, key=lambda s: s.time)
    limits = BufferLimits(max_samples=1024, max_age=1e9)
    shares = [
        Counter(s.series for s in ordered[a:b])[key("loss")]
        for a, b in pieces(ordered, partial(dryrun.lookback, ruleset, reach=1024), limits)
    ]
    assert dryrun.lookback(ruleset, key("loss"), None, 1024) is None
    assert max(shares) == floor(limits) == 256


def test_a_replay_buffer_is_widened_only_where_that_changes_nothing_read() -> None:
    """A replay feeds larger pieces in a larger buffer where every rule reads less far back than the buffer holds
    and no step goes back; a window longer than the buffer, a step going back, or a rule that does not say how far
    back it reads keep the buffer's own size (where a larger one would change the answer). A spike's baseline of a
    duration longer than the buffer reads what the service's buffer holds, in a larger one too."""
    small = BufferLimits(max_samples=56, max_age=1e9)
    loss, tps = key("loss"), key("tps")
    steady = [Sample(loss, 1000.0 + i, i, 2.0 + (i % 5) / 10) for i in range(600)]
    spike = [rule("{name: sp, metric: loss, condition: {spike: {ratio: 1.8, baseline: 40 samples}}}")]

    def widened(ruleset: RuleSet, data: list[Sample]) -> int:
        ordered = sorted(data, key=lambda s: s.time)
        lookback = partial(dryrun.lookback, ruleset, reach=small.max_samples)
        return plan(ordered, lookback, small, widen=dryrun.may_widen(ruleset))[0].max_samples

    assert widened(RuleSet(spike), steady) == 56 + MAX_PIECE
    # a drop from 100 to 60 tokens/s: a 30 s median over 55 samples (all the buffer holds) follows it in 28
    # samples; over the 300 samples of 30 s at 10 a second it would take 150. The spike reads 55 samples back,
    # in any buffer; an average over 30 s reads all 300 where they are held: no wider buffer for it
    drop = [Sample(tps, 1000.0 + i / 10, i, 100.0 if i < 250 else 60.0) for i in range(600)]
    slow = RuleSet([rule("{name: tp, metric: tps, condition: {spike: {ratio: 0.7, direction: down, baseline: 30s}}}")])
    assert widened(slow, drop) == 56 + MAX_PIECE
    mean = RuleSet([rule("{name: m, metric: tps, condition: {avg: {over: 30s, baseline: 30s}, op: <, ratio: 0.7}}")])
    assert widened(mean, drop) == 56
    # a restart from step 150 after step 199: the service's buffer keeps 6 samples before it (too few for a
    # baseline of 30), a larger one 150 (a baseline, and a spike)
    restart = [Sample(loss, 1000.0 + i, i, 1.0) for i in range(200)]
    restart += [Sample(loss, 1200.0 + k, 150 + k, 3.0) for k in range(300)]
    baseline = "{spike: {ratio: 1.8, baseline: 40 samples, min_samples: 30}}"
    few = RuleSet([rule(f"{{name: few, metric: loss, condition: {baseline}}}")])
    assert widened(few, restart) == 56
    odd = [*steady[:300], Sample(loss, 1300.5, 2**70, 2.0), *steady[301:]]  # a step beyond int64: order unknown
    assert widened(RuleSet(spike), odd) == 56
    plateau = RuleSet([*spike, rule("{name: p, metric: run.stalled, condition: {plateau: {patience: 3}}}")])
    assert widened(plateau, steady) == 56  # the runs' own series: their rules must say
    for ruleset, data in ((RuleSet(spike), steady), (slow, drop), (mean, drop), (few, restart), (plateau, steady)):
        assert rows(dryrun.replay(ruleset, data, small)) == one_at_a_time(ruleset, data, small)
    fired = [r[3] for r in one_at_a_time(slow, drop, small) if r[2] == "firing"]
    assert fired == [250]  # and its median follows the drop within 28 samples, as in the service
    # where the buffer keeps its size, a larger one would have changed the answer; the spike's does not
    large = BufferLimits(max_samples=56 + MAX_PIECE, max_age=1e9)
    for ruleset, data in ((mean, drop), (few, restart)):
        assert one_at_a_time(ruleset, data, large) != one_at_a_time(ruleset, data, small)
    reaching = replace(large, reach=56)
    assert one_at_a_time(slow, drop, reaching) == one_at_a_time(slow, drop, small)
    assert one_at_a_time(slow, drop, large) != one_at_a_time(slow, drop, small)
