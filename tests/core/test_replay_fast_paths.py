"""The dry-run's fast paths change no result: each is compared with the sample-by-sample way it replaces.

- `RunTracker.observe` on plain progress samples (column-wise) against its loop: same derived samples,
  same runs, same next tick;
- `SeriesBuffer.append` of small batches of few series (column-wise) against its loop: same series,
  restarts, change order and finish times;
- the replay's time ordering against the generator and sort it replaces;
- whole replays (the default rules, and rules with `for:`, `absent`, spikes) with every fast path on
  and off: the same transitions.
"""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import pytest
from core_helpers import noted_list, rule
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd import buffer as buffer_module
from alertd import dryrun
from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.columns import ColumnList, Columns
from alertd.config import load_config
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import RuleSet
from alertd.runs import tracker as runs
from alertd.runs.tracker import RunTracker

DEFAULT_RULES = Path(__file__).resolve().parents[2] / "rules" / "default.yaml"
SLOW = 10**9


def slow_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast path off: observe and append go sample by sample."""
    monkeypatch.setattr(runs, "_FAST_MIN", SLOW)
    monkeypatch.setattr(buffer_module, "_BULK_SMALL", SLOW)


def fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast path tried on every batch."""
    monkeypatch.setattr(runs, "_FAST_MIN", 1)
    monkeypatch.setattr(buffer_module, "_BULK_SMALL", 1)
    monkeypatch.setattr(buffer_module, "_BULK_PER_SERIES", 0)


def key(metric: str, run: str | None = "a", source: str | None = "tb", **extra: str) -> SeriesKey:
    labels = {"source": source, "run": run, **extra}
    return SeriesKey(metric, make_labels({k: v for k, v in labels.items() if v is not None}))


# Mostly progress samples (what the fast path takes); now and then what sends a batch sample by sample.
METRICS = st.sampled_from(
    [("loss", "a")] * 6
    + [("grad_norm", "a")] * 3
    + [("loss", "b")] * 3
    + [("gpu.util", None), ("run.stalled", "a")]
    + [("run.finished", "a"), ("run.crashed", "b"), ("train/train_runtime", "a"), ("run.started", "b")]
)
SAMPLE = st.tuples(
    METRICS,
    st.one_of(st.integers(0, 30), st.integers(-5, -1), st.integers(600, 2000)),  # time moves (gaps, back)
    st.one_of(st.integers(0, 50), st.none()),
    st.sampled_from([0.0, 1.0, 2.5, math.nan]),
)


def build_batches(
    spec: list[Any], cuts: list[int], keys: dict[tuple[str, str | None], SeriesKey]
) -> list[list[Sample]]:
    t, out = 1000.0, []
    for (metric, run), dt, step, value in spec:
        t += dt
        out.append(Sample(keys.setdefault((metric, run), key(metric, run)), t, step, value))
    points = sorted({0, len(out), *(c % (len(out) + 1) for c in cuts)})
    return [out[a:b] for a, b in itertools.pairwise(points)]


def observe_all(batches: list[list[Sample]], nows: list[float | None], columns: bool = False) -> tuple[list[Any], Any]:
    tracker = RunTracker(stall_after=600.0)
    derived = [
        tracker.observe(batch, now, Columns.of(batch) if columns else None)
        for batch, now in zip(batches, nows, strict=False)
    ]
    state = [(k, r.state, r.reason, r.exit_code, r.started, r.live, r.ended_at) for k, r in tracker.runs.items()]
    steps = [(r.first_step, r.last_step, r.first_time, r.last_time) for r in tracker.runs.values()]
    return [derived, state, steps, tracker._next_tick], tracker


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(SAMPLE, min_size=1, max_size=120),
    cuts=st.lists(st.integers(0, 120), max_size=5),
    nows=st.lists(st.one_of(st.none(), st.floats(0, 1e5)), min_size=6, max_size=6),
)
def test_observe_column_wise_is_observe_sample_by_sample(spec, cuts, nows) -> None:  # type: ignore[no-untyped-def]
    batches = build_batches(spec, cuts, {})
    with pytest.MonkeyPatch.context() as mp:
        slow_paths(mp)
        expected, slow = observe_all(batches, nows)
    for columns in (False, True):  # the batch taken apart by the tracker, or given taken apart (a replay's)
        with pytest.MonkeyPatch.context() as mp:
            fast_paths(mp)
            got, fast = observe_all(batches, nows, columns)
        assert got == expected
        assert list(fast.runs) == list(slow.runs)
        assert list(fast.runs.values()) == list(slow.runs.values())


def test_observe_takes_a_long_run_of_progress_column_wise() -> None:
    """The fast path does apply (and says so by deriving nothing) on the replay's usual batch."""
    loss, norm = key("loss"), key("grad_norm")
    batch = [Sample(loss if i % 2 else norm, 10.0 + i, i // 2, 1.0) for i in range(256)]
    tracker = RunTracker()
    assert tracker._observe_progress(batch, None)
    run = tracker.runs[("tb", "a")]
    assert (run.first_step, run.last_step, run.first_time, run.last_time) == (0, 127, 10.0, 265.0)
    assert not tracker._observe_progress([*batch[:5], Sample(loss, 2000.0, 200, 1.0)], None)  # a gap: a stall


BUFFER_SAMPLE = st.tuples(
    st.integers(0, 3),  # which series (3: run.finished)
    st.integers(0, 20),  # time moves
    st.one_of(st.integers(-3, 6), st.none()),  # step moves (back: a restart), or no step
    st.sampled_from([0.0, 1.0, 7.0, math.nan, math.inf]),
)


def append_all(batches: list[list[Sample]], limits: BufferLimits) -> tuple[SeriesBuffer, list[Any]]:
    buf = SeriesBuffer(limits)
    restarts = [buf.append(b) for b in batches]
    return buf, restarts


def buffer_state(buf: SeriesBuffer) -> list[Any]:
    series = [
        (
            s.key,
            s.times[s.start :].tobytes(),
            s.values[s.start :].tobytes(),
            s.steps[s.start :].tobytes(),
            s.base,
            s.disorder,
        )
        for s in buf
    ]
    changed = [(s.key, s.changed) for s in buf.changed_since(0)]
    cuts = [(s.generation, tuple(s.cuts)) for s in buf]
    return [series, cuts, changed, buf.version, dict(buf._finished), dict(buf._superseded), dict(buf.dropped)]


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(BUFFER_SAMPLE, min_size=1, max_size=200),
    cuts=st.lists(st.integers(0, 200), max_size=4),
    max_samples=st.sampled_from([8, 64, 1024]),
    pids=st.booleans(),
)
def test_small_batches_column_wise_are_appended_as_sample_by_sample(spec, cuts, max_samples, pids) -> None:  # type: ignore[no-untyped-def]
    metrics = ["loss", "grad_norm", "lr", "run.finished"]
    keys = [key(m, pid=str(i % 2)) if pids else key(m) for i, m in enumerate(metrics)]
    t, steps, data = 0.0, [0, 0, 0, 0], []
    for which, dt, ds, value in spec:
        t += dt
        if ds is not None:
            steps[which] = max(0, steps[which] + ds)
        data.append(Sample(keys[which], t, None if ds is None else steps[which], value))
    (fast, fast_restarts), (slow, slow_restarts) = both_ways(
        data, cuts, BufferLimits(max_samples=max_samples, max_age=60.0, max_series=3)
    )
    assert fast_restarts == slow_restarts
    assert buffer_state(fast) == buffer_state(slow)


def both_ways(data: list[Sample], cuts: list[int], limits: BufferLimits) -> tuple[Any, Any]:
    """`data` cut into batches at `cuts` and appended column-wise where it can be, then sample by sample: each
    buffer with its restarts (`append_all`)."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    batches = [data[a:b] for a, b in itertools.pairwise(points)]
    with pytest.MonkeyPatch.context() as mp:
        fast_paths(mp)
        fast = append_all(batches, limits)
    with pytest.MonkeyPatch.context() as mp:
        slow_paths(mp)
        slow = append_all(batches, limits)
    return fast, slow


@settings(max_examples=100, deadline=None)
@given(
    moves=st.lists(st.tuples(st.integers(0, 1), st.integers(-5, 20)), min_size=1, max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=3),
)
def test_column_wise_batches_note_where_times_go_back_as_sample_by_sample(moves, cuts) -> None:  # type: ignore[no-untyped-def]
    """Every step present (so large batches go column-wise), times now and then going back: each series notes the
    newest place its times went back (`Series.disorder`) as the loop does."""
    keys = [key("loss"), key("lr")]
    t, data = 0.0, []
    for i, (which, dt) in enumerate(moves):
        t += dt
        data.append(Sample(keys[which], t, i, 1.0))
    (fast, _), (slow, _) = both_ways(data, cuts, BufferLimits(max_samples=1024, max_age=1e9))
    assert buffer_state(fast) == buffer_state(slow)


@settings(max_examples=100, deadline=None)
@given(
    times=st.lists(
        st.one_of(st.floats(0, 100), st.sampled_from([math.nan, math.inf, 1e12, -0.0, 5.0, 5])), max_size=40
    ),
    until=st.one_of(st.none(), st.floats(0, 100)),
)
def test_the_time_order_is_the_sorted_usable_samples(times, until) -> None:  # type: ignore[no-untyped-def]
    keys = [key("loss"), key("lr")]
    data = [Sample(keys[i % 2], t, i, float(i)) for i, t in enumerate(times)]
    expected = sorted(
        (s for s in dryrun._usable_times(data, SeriesBuffer()) if until is None or s.time <= until),
        key=lambda s: s.time,
    )
    got, columns = dryrun._time_ordered(data, SeriesBuffer(), until)
    assert [(s.series, s.time, s.step) for s in got] == [(s.series, s.time, s.step) for s in expected]
    if columns is not None:  # the columns, where it has them, are those of the ordered samples
        want = Columns.of(got)
        assert want is not None and columns.times.tolist() == want.times.tolist() == [s.time for s in got]
        assert columns.ids.tolist() == want.ids.tolist() and columns.values.tolist() == want.values.tolist()
        assert columns.steps is not None and want.steps is not None and columns.steps.tolist() == want.steps.tolist()
        assert columns.samples is got
    for noted in (ColumnList(data), noted_list(data)):  # a source's list: the same samples, the same columns
        again, its = dryrun._time_ordered(noted, SeriesBuffer(), until)
        assert again == got and (its is None) == (columns is None)
        if its is not None and columns is not None:
            assert its.ids.tolist() == columns.ids.tolist() and its.times.tolist() == columns.times.tolist()
    assert [type(s.time) for s in got] == [type(s.time) for s in expected]


EXTRA_RULES = [
    rule("{name: hi, metric: loss, condition: '> 5', for: 25s, keep_firing_for: 15s}"),
    rule("{name: gone, metric: grad_norm, condition: {absent: 35s}}"),
    rule("{name: sp, metric: train/loss, condition: {spike: {ratio: 2, baseline: 30s, min_samples: 2}}}"),
    rule("{name: stalled, metric: run.stalled, condition: '> 0', for: 1s}"),
]


def replay_data(seed: int, n: int, runs_n: int, gap_every: int) -> list[Sample]:
    """n samples of 3 tags in `runs_n` runs; now and then a gap (a stall), a NaN, a spike, a restart, a marker."""
    rnd = random.Random(seed)
    tags = ["train/loss", "loss", "grad_norm", "train/tokens_per_second"]
    keys = {(r, tag): key(tag, f"r{r}") for r in range(runs_n) for tag in tags}
    t, steps, out = 1.7e9, dict.fromkeys(range(runs_n), 0), []
    for i in range(n):
        r = rnd.randrange(runs_n)
        t += rnd.choice([0.0, 0.5, 1.0, 3.0]) + (900.0 if gap_every and i % gap_every == gap_every - 1 else 0.0)
        steps[r] += 1 if rnd.random() > 0.01 else -5
        tag = rnd.choice(tags)
        value = rnd.choice([1.0, 1.1, 0.9, 6.0, 0.0, math.nan, 100.0, 0.2]) if rnd.random() < 0.1 else 1.0
        out.append(Sample(keys[r, tag], t, max(steps[r], 0), value))
        if rnd.random() < 0.002:
            out.append(Sample(key(rnd.choice(["run.finished", "run.started", "run.crashed"]), f"r{r}"), t, None, 1.0))
    if seed % 3 == 0:
        rnd.shuffle(out)  # the replay sorts
    return out


def replay_all(ruleset: RuleSet, data: list[Sample], limits: BufferLimits, until: float | None) -> list[Any]:
    return [
        (t.time, t.rule, t.state.value, t.step, repr(t.value), t.labels, t.annotations)
        for t in dryrun.replay(ruleset, data, limits, until, 600.0)
    ]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 1500),
    runs_n=st.integers(1, 3),
    gap_every=st.sampled_from([0, 97, 400]),
    max_samples=st.sampled_from([64, 300, 1024]),
    tail=st.one_of(st.none(), st.floats(0, 5000)),
)
def test_a_replay_with_every_fast_path_is_the_replay_without(seed, n, runs_n, gap_every, max_samples, tail) -> None:  # type: ignore[no-untyped-def]
    data = replay_data(seed, n, runs_n, gap_every)
    ruleset = RuleSet([*load_config([str(DEFAULT_RULES)]).rules, *EXTRA_RULES])
    limits = BufferLimits(max_samples=max_samples)
    until = None if tail is None else max(s.time for s in data) + tail
    with pytest.MonkeyPatch.context() as mp:
        slow_paths(mp)
        expected = replay_all(ruleset, data, limits, until)
    with pytest.MonkeyPatch.context() as mp:
        fast_paths(mp)
        assert replay_all(ruleset, data, limits, until) == expected
    assert replay_all(ruleset, data, limits, until) == expected  # the thresholds as shipped
