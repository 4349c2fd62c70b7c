"""`plateau`: Lightning's EarlyStopping as a condition, as time tables and against a reference."""

from __future__ import annotations

import window_helpers as ref
from core_helpers import INF, NAN, rule, samples, series, table
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.model import Sample, SeriesKey
from alertd.rules.conditions import Plateau


def fires(cond: str, values: list[float], limits: BufferLimits | None = None) -> list[tuple[float, str]]:
    r = rule(f"{{name: p, metric: val_loss, condition: {cond}}}")
    return [(t, s) for t, _, s in table([r], samples(series("val_loss"), values), limits=limits)]


def test_fires_where_lightning_stops_and_until_a_new_best() -> None:
    # best 1.0 at t=10; 1.0 (not strictly better), 1.2, 1.1 are three without improvement: fires at t=40;
    # 0.9 is a new best (resolves), then three more without.
    values = [2.0, 1.0, 1.0, 1.2, 1.1, 1.05, 0.9, 0.95, 0.95, 0.95]
    assert fires("{plateau: {patience: 3}}", values) == [(40.0, "firing"), (60.0, "resolved"), (90.0, "firing")]


def test_min_delta_is_the_improvement_needed() -> None:
    # With min_delta 0.1, 0.95 and 0.91 don't improve on 1.0 (1.0 - 0.1 = 0.9 is not beaten strictly); 0.89 does.
    assert fires("{plateau: {patience: 2, min_delta: 0.1}}", [1.0, 0.95, 0.91, 0.89]) == [
        (20.0, "firing"),
        (30.0, "resolved"),
    ]
    assert fires("{plateau: {patience: 2, min_delta: 0.1}}", [1.0, 0.95, 0.875, 0.8]) == []


def test_mode_max() -> None:
    # Accuracy: 0.5, 0.6 (best), 0.6 and 0.55 are no improvement: patience 2 fires at t=30.
    assert fires("{plateau: {patience: 2, mode: max}}", [0.5, 0.6, 0.6, 0.55, 0.7]) == [
        (30.0, "firing"),
        (40.0, "resolved"),
    ]


def test_non_finite_values_are_no_improvement() -> None:
    assert fires("{plateau: {patience: 2}}", [1.0, NAN, -INF, 0.5]) == [(20.0, "firing"), (30.0, "resolved")]
    # -Inf never becomes the best (in Lightning with check_finite=False it would, and nothing would improve on it)
    assert fires("{plateau: {patience: 2}}", [1.0, -INF, 0.5, 0.4, 0.3]) == []


def test_the_first_value_is_always_an_improvement() -> None:
    assert fires("{plateau: {patience: 1}}", [5.0]) == []
    assert fires("{plateau: {patience: 1}}", [5.0, 5.0]) == [(10.0, "firing")]


def test_a_restart_rewinds_to_the_kept_samples() -> None:
    """A run resumed from a checkpoint continues from the state at that checkpoint (as Lightning, which saves
    EarlyStopping's wait and best in it): the samples at and after the resumed step are replaced."""
    r = rule("{name: p, metric: val_loss, condition: {plateau: {patience: 2}}}")
    key = series("val_loss")
    first = [Sample(key, t * 10.0, step, v) for t, (step, v) in enumerate([(0, 1.0), (1, 0.5), (2, 0.6), (3, 0.7)])]
    # resumed at step 2: 0.5 is the best, wait 0; then 0.4 improves, 0.45 and 0.5 don't
    again = [Sample(key, 40.0 + t * 10.0, step, v) for t, (step, v) in enumerate([(2, 0.4), (3, 0.45), (4, 0.5)])]
    assert table([r], first + again) == [(30.0, "p", "firing"), (40.0, "p", "resolved"), (60.0, "p", "firing")]


def test_after_the_buffer_trimmed_the_best_it_keeps_its_running_state() -> None:
    # The buffer keeps 3 samples; the best (0.1) leaves it, the running state still knows it.
    assert fires("{plateau: {patience: 5}}", [0.1, 0.2, 0.2, 0.2, 0.2, 0.2], BufferLimits(max_samples=3)) == [
        (50.0, "firing")
    ]


values_st = st.lists(
    st.one_of(st.floats(0, 3), st.sampled_from([1.0, 1.5, NAN, INF, -INF]), st.integers(0, 4).map(float)),
    min_size=1,
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(
    values=values_st,
    patience=st.integers(1, 6),
    min_delta=st.sampled_from([0.0, 0.001, 0.25, 1.0]),
    mode=st.sampled_from(["min", "max"]),
    batches=st.lists(st.integers(1, 10), min_size=1, max_size=8),
)
def test_the_running_state_equals_early_stopping_from_the_start(values, patience, min_delta, mode, batches) -> None:  # type: ignore[no-untyped-def]
    """Judged in batches of any size (each index once, in order, as evaluate does), or from a fresh condition
    at the last index only: the same as Lightning's loop over every value."""
    want = ref.early_stopping(values, patience, min_delta, mode)
    cond = Plateau(patience, min_delta, mode)  # type: ignore[arg-type]
    buf = SeriesBuffer(BufferLimits(max_samples=100, max_age=1e9))
    key = SeriesKey("val_loss", ())
    got: list[bool] = []
    n, k = 0, 0
    while n < len(values):
        size = batches[k % len(batches)]
        k += 1
        buf.append([Sample(key, float(j), j, values[j]) for j in range(n, min(n + size, len(values)))])
        s = buf.get(key)
        assert s is not None
        got += [cond.check(s, i) for i in range(n, len(s.times))]
        n = len(s.times)
    assert got == want
    s = buf.get(key)
    assert s is not None
    assert Plateau(patience, min_delta, mode).check(s, len(values) - 1) == want[-1]  # type: ignore[arg-type]
