"""Hushed series (`alertd.rules.hush`): the service's chain of evaluations, which stops looking at a series whose
rules are all quiet and whose next sample can't stir them, gives what evaluations that never hush give."""

from __future__ import annotations

import math
from collections.abc import Mapping

from core_helpers import rule
from hypothesis import event, given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.model import Sample, SeriesKey
from alertd.rules import RuleSet
from alertd.rules.evaluate import EvalState, PairKey, evaluate
from alertd.rules.hush import ParkedTracks, settled_tracks
from alertd.rules.state import Track

RULES = [
    rule("{name: nf, metric: [x, y], condition: nonfinite}"),
    rule("{name: hi, metric: x, condition: '> 5'}"),
    rule("{name: lo, metric: x, condition: '<= 1', for: 20s, keep_firing_for: 10s}"),
    rule("{name: ge, metric: y, condition: '>= 4', consecutive: 2}"),
    rule("{name: ne, metric: y, condition: '!= 3'}"),
    rule("{name: eq, metric: z, condition: '== 3'}"),  # no interval: z is never hushed
    rule("{name: up, metric: w, condition: increasing}"),  # w neither, nor is v (an absence timed)
    rule("{name: gone, metric: [w, v], condition: {absent: 45s}}"),
    rule("{name: both, metric: v, condition: '> 7'}"),
]
KEYS = [SeriesKey(m, (("run", r), ("source", "s"))) for m in "xyzwvu" for r in "ab"]  # u: no rule watches it
OTHER = st.one_of(
    st.sampled_from([0.0, 1.0, math.nextafter(1.0, 2.0), 4.0, math.nextafter(4.0, 0.0), 5.0, 6.0, 8.0]),
    st.floats(-10, 10),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
VALUES = st.integers(0, 9).flatmap(lambda k: st.just(3.0) if k < 7 else OTHER)  # 3.0: quiet on every hushable rule
# one tick: per key, how many samples (mostly one, sometimes none: the series idles), their values, whether its step
# goes back (a restart, which cuts the samples after the step)
TICK = st.lists(
    st.tuples(st.sampled_from([1, 1, 1, 1, 1, 1, 0, 0, 2, 3]), VALUES, st.booleans()),
    min_size=len(KEYS),
    max_size=len(KEYS),
)
READ = st.sampled_from(["none", "none", "none", "tracks", "save", "copy"])


def fields(tracks: Mapping[PairKey, Track]) -> dict[PairKey, tuple[str, ...]]:
    """Every field of every track (read as any reader does: settled)."""
    out = {p: tuple(repr(getattr(tr, f)) for f in Track.__slots__) for p, tr in tracks.items()}
    assert not isinstance(tracks, ParkedTracks) or not tracks.parking.hushes
    return out


class Chain:
    """A chain of evaluations on its own buffer (the same samples as every other chain's)."""

    def __init__(self, in_place: bool, max_samples: int, shared: SeriesBuffer | None = None, hush: bool = True) -> None:
        self.ruleset = RuleSet(RULES, hush=hush)
        self.buffer = (
            shared
            if shared is not None
            else SeriesBuffer(BufferLimits(max_samples=max_samples, max_age=1e6, max_series=11))
        )
        self.in_place = in_place
        self.state = EvalState()
        self.transitions: list[tuple[object, ...]] = []

    def tick(self, now: float) -> None:
        ev = evaluate(self.ruleset, self.buffer, now, self.state, in_place=self.in_place)
        self.state = ev.state
        self.transitions += sorted(
            (t.time, t.rule, t.state.value, t.labels, repr(t.value), t.step) for t in ev.transitions
        )


@settings(max_examples=200, deadline=None)
@given(
    ticks=st.lists(st.tuples(TICK, READ, st.integers(1, 40)), min_size=1, max_size=40),
    max_samples=st.sampled_from([2, 4, 64]),
)
def test_a_chain_that_hushes_gives_the_transitions_and_tracks_of_one_that_never_does(ticks, max_samples) -> None:  # type: ignore[no-untyped-def]
    """Random ticks: most series one new sample, some none, two or three, a restart (the step going back, which
    cuts the samples after it), values on and beside each threshold, NaN and the infinities; a buffer keeping two
    samples a series, or eleven series in all (a series idle a minute is evicted, and may come back); between ticks,
    the tracks read (settled), taken for a save, or evaluated not in place. The chain handed over in place (which
    hushes) and a second one on the same buffer, judging in turns with it, give at every tick the transitions
    and, wherever read, the tracks that chains never handed over (which never hush) give."""
    hushing = Chain(True, max_samples)
    beside = Chain(True, max_samples, shared=hushing.buffer)  # a second chain in turns on the same buffer
    unhushed = Chain(True, max_samples, shared=hushing.buffer, hush=False)  # in place, each sample judged
    plain = Chain(False, max_samples)
    t, steps, hushed = 0.0, dict.fromkeys(KEYS, 0), 0
    for samples, read, gap in ticks:
        t += gap
        batch = []
        for key, (count, v, back) in zip(KEYS, samples, strict=True):
            if back and steps[key] > 2 and v != 3.0:
                steps[key] -= 2
            for n in range(count):
                steps[key] += 1
                batch.append(Sample(key, t + n * 0.1, steps[key], v + n))
        batch.sort(key=lambda s: s.time)
        for chain in (hushing, plain):
            chain.buffer.append(batch)
        for chain in (hushing, beside, unhushed, plain):
            chain.tick(t + 0.5)
        hushed += type(hushing.state.tracks) is ParkedTracks
        assert type(unhushed.state.tracks) is dict
        assert hushing.transitions == plain.transitions == beside.transitions == unhushed.transitions
        if read == "tracks":
            assert fields(hushing.state.tracks) == fields(plain.state.tracks)
        elif read == "save":
            assert fields(settled_tracks(hushing.state.tracks)) == fields(plain.state.tracks)
        elif read == "copy":  # an evaluation not in place settles what it is handed: the chain goes on all the same
            other = evaluate(hushing.ruleset, hushing.buffer, t + 0.7, hushing.state).state.tracks
            assert fields(other) == fields(evaluate(plain.ruleset, plain.buffer, t + 0.7, plain.state).state.tracks)
    assert fields(hushing.state.tracks) == fields(plain.state.tracks)
    assert fields(beside.state.tracks) == fields(plain.state.tracks) == fields(unhushed.state.tracks)
    assert dict(hushing.state.timers) == dict(plain.state.timers)
    event(f"ticks ending with a series hushed: {'some' if hushed else 'none'}")  # --hypothesis-show-statistics


def test_a_quiet_series_is_hushed_and_its_samples_noted_once() -> None:
    """x and y quiet, each judged only by its value: hushed at their second look, the next samples are noted on
    the hush alone (not among the pairs the evaluation says it wrote), and the tracks read show the last one."""
    ruleset, buffer, state = RuleSet(RULES), SeriesBuffer(), EvalState()
    x, y, w = (SeriesKey(m, (("run", "a"),)) for m in "xyw")
    for i in range(4):
        buffer.append([Sample(x, float(i), i, 3.0), Sample(y, float(i), i, 3.0), Sample(w, float(i), i, 9.0 - i)])
        state = evaluate(ruleset, buffer, i + 0.5, state, in_place=True).state
    assert type(state.tracks) is ParkedTracks
    assert {p[0] for p in state.written if p[1] in (x, y)} == set()  # hushed: noted once, on the hush
    assert {p[0] for p in state.written if p[1] == w} == {"up", "gone"}
    hushed = {p for p, tr in state.tracks.raw.items() if tr.park is not None}
    assert hushed == {(n, x) for n in ("nf", "hi", "lo")} | {(n, y) for n in ("nf", "ge", "ne")}
    tracks = settled_tracks(state.tracks)
    assert (tracks[("hi", x)].value, tracks[("hi", x)].step, tracks[("ne", y)].time) == (3.0, 3, 3.0)
    assert all(tr.park is None for tr in tracks.values())


def test_a_sample_that_stirs_a_rule_ends_the_hush_and_fires() -> None:
    ruleset, buffer, state = RuleSet(RULES), SeriesBuffer(), EvalState()
    x = SeriesKey("x", (("run", "a"),))
    fired = []
    for i, v in enumerate([3.0, 3.0, 3.0, 5.0, math.nextafter(5.0, 9.0), 2.0]):
        buffer.append([Sample(x, float(i), i, v)])
        ev = evaluate(ruleset, buffer, i + 0.5, state, in_place=True)
        state = ev.state
        fired += [(t.rule, t.state.value, t.step) for t in ev.transitions]
    assert fired == [("hi", "firing", 4), ("hi", "resolved", 5)]


def test_a_hushed_series_evicted_and_back_goes_on_from_its_hushed_notes() -> None:
    """x of run a, hushed, idles past a minute: the buffer (two series at most) gives its place to x of run c, then
    a's next sample makes a new series of the same key; its tracks, still hushed on the series gone, take their
    note first (`_Run.track`). Both chains give the same alerts and tracks."""
    chains = [Chain(True, 64), Chain(False, 64)]
    for chain in chains:
        chain.buffer.limits = BufferLimits(max_series=2)
    a, b, c = (SeriesKey("x", (("run", r), ("source", "s"))) for r in "abc")
    batches = [[a, b]] * 4 + [[b]] * 3 + [[b, c], [a], [a], [a]]
    hushed_then_gone = False
    for n, keys in enumerate(batches):
        t = 10.0 * n if n < 4 else 100.0 + n if n < 8 else 300.0 + n  # a idles from 40 s, b and c from 107 s
        for chain in chains:
            series_a = chain.buffer.get(a)
            chain.buffer.append([Sample(k, t, n, 6.0 if n == 9 else 3.0) for k in keys])
            chain.tick(t + 0.5)
            if chain.in_place and series_a is not None and series_a.quiet is not None:
                hushed_then_gone |= chain.buffer.get(a) is not series_a
    assert hushed_then_gone
    assert chains[0].transitions == chains[1].transitions
    assert [(t[1], t[2], t[5]) for t in chains[0].transitions] == [("hi", "firing", 9), ("hi", "resolved", 10)]
    assert fields(chains[0].state.tracks) == fields(chains[1].state.tracks)
