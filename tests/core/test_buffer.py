"""The series buffer: limits, non-finite values, restarts, and what a reader has not seen."""

from __future__ import annotations

import math

from core_helpers import INF, NAN, rule, samples, series, table

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.model import Sample


def values(buf: SeriesBuffer, key) -> list[float]:  # type: ignore[no-untyped-def]
    s = buf.get(key)
    assert s is not None
    return list(s.values[s.start :])


def test_nan_and_infinities_are_kept() -> None:
    buf = SeriesBuffer()
    key = series()
    buf.append(samples(key, [1.0, NAN, INF, -INF]))
    got = values(buf, key)
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2:] == [INF, -INF]


def test_count_limit_keeps_the_newest() -> None:
    buf = SeriesBuffer(BufferLimits(max_samples=3, max_age=1e9))
    key = series()
    buf.append(samples(key, [1, 2, 3, 4, 5]))
    assert values(buf, key) == [3, 4, 5]
    assert buf.get(key).base == 2  # type: ignore[union-attr]


def test_age_limit_drops_old_samples_but_keeps_the_newest() -> None:
    buf = SeriesBuffer(BufferLimits(max_samples=100, max_age=25))
    key = series()
    buf.append(samples(key, [1, 2, 3, 4, 5]), now=40)  # times 0..40
    assert values(buf, key) == [3, 4, 5]  # 20, 30, 40 are within 25s of 40
    buf.evict_all(now=10_000)
    assert values(buf, key) == [5]  # `absent` needs the time of the last sample


def test_compaction_keeps_positions_stable() -> None:
    buf = SeriesBuffer(BufferLimits(max_samples=10, max_age=1e9))
    key = series()
    for i in range(2000):
        buf.append([Sample(key, float(i), i, float(i))])
    s = buf.get(key)
    assert s is not None and len(s) == 10 and s.end == 2000
    assert s.values[s.index(1995)] == 1995.0
    assert len(s.times) < 300  # The dead prefix was compacted away.


def test_a_step_going_backwards_drops_the_samples_at_and_after_it() -> None:
    buf = SeriesBuffer()
    key = series()
    buf.append([Sample(key, float(t), step, v) for t, step, v in [(0, 100, 1.0), (1, 200, 2.0), (2, 300, 3.0)]])
    restarts = buf.append([Sample(key, 3.0, 200, 9.0)])
    assert values(buf, key) == [1.0, 9.0]
    assert [(r.from_step, r.to_step, r.dropped) for r in restarts] == [(300, 200, 2)]


def test_an_equal_step_is_not_a_restart() -> None:
    buf = SeriesBuffer()
    key = series()
    assert buf.append([Sample(key, 0.0, 5, 1.0), Sample(key, 1.0, 5, 2.0)]) == []
    assert values(buf, key) == [1.0, 2.0]


def test_a_restart_is_not_a_false_spike() -> None:
    # The loss was 1.0 up to step 300, the run resumed from step 200 where the loss was 1.0 too:
    # the rewound history must not look like a jump, and the resumed samples are evaluated.
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 5 samples}}}")
    key = series()
    before = [Sample(key, float(i), i * 10, 1.0 + (0.01 * i)) for i in range(30)]
    after = [Sample(key, 30.0 + i, 200 + i * 10, 1.0) for i in range(5)] + [Sample(key, 40.0, 300, 3.0)]
    assert table([r], before + after) == [(40.0, "s", "firing")]


def test_reader_positions_survive_a_restart() -> None:
    buf = SeriesBuffer()
    key = series()
    buf.append([Sample(key, float(i), i, 1.0) for i in range(5)])
    s = buf.get(key)
    assert s is not None
    seen_gen, seen_pos = s.generation, s.end
    buf.append([Sample(key, 5.0, 2, 7.0), Sample(key, 6.0, 3, 8.0)])
    first = s.first_new(seen_gen, seen_pos)
    assert [s.values[s.index(p)] for p in range(first, s.end)] == [7.0, 8.0]


def test_changed_since_lists_only_touched_series() -> None:
    buf = SeriesBuffer()
    a, b = series(run="a"), series(run="b")
    buf.append(samples(a, [1]) + samples(b, [1]))
    v = buf.version
    buf.append(samples(b, [2], start=100))
    assert [s.key for s in buf.changed_since(v)] == [b]
    assert {s.key for s in buf.changed_since(0)} == {a, b}


def test_memory_per_sample_is_small() -> None:
    buf = SeriesBuffer(BufferLimits(max_samples=1000, max_age=1e9))
    for r in range(20):
        buf.append(samples(series(run=str(r)), [float(i) for i in range(1000)], every=1))
    assert buf.nbytes() / buf.sample_count() <= 32
