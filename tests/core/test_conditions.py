"""Time tables for every condition: when is each one true, at the edges too."""

from __future__ import annotations

from core_helpers import INF, NAN, rule, samples, series, table


def test_threshold_fires_above_and_not_at_the_threshold() -> None:
    r = rule("{name: hi, metric: g, condition: '> 100'}")
    data = samples(series("g"), [50, 100, 100.5, 99])
    assert table([r], data) == [(20.0, "hi", "firing"), (30.0, "hi", "resolved")]


def test_threshold_inclusive_operators_hold_at_the_threshold() -> None:
    ge = rule("{name: ge, metric: g, condition: '>= 100'}")
    le = rule("{name: le, metric: g, condition: {op: '<=', value: 0.5}}")
    assert table([ge], samples(series("g"), [99, 100])) == [(10.0, "ge", "firing")]
    assert table([le], samples(series("g"), [0.6, 0.5])) == [(10.0, "le", "firing")]


def test_nan_compares_false_for_every_operator() -> None:
    rules = [rule(f"{{name: r{i}, metric: g, condition: '{op} 1'}}") for i, op in enumerate(["<", ">", "!=", "=="])]
    assert table(rules, samples(series("g"), [NAN, NAN])) == []


def test_infinity_compares_as_a_number() -> None:
    r = rule("{name: hi, metric: g, condition: '> 100'}")
    assert table([r], samples(series("g"), [1, INF])) == [(10.0, "hi", "firing")]


def test_nonfinite_catches_nan_and_both_infinities() -> None:
    r = rule("{name: nf, metric: loss, condition: nonfinite}")
    data = samples(series(), [1.0, NAN, 2.0, INF, -INF, 3.0])
    assert table([r], data) == [
        (10.0, "nf", "firing"),
        (20.0, "nf", "resolved"),
        (30.0, "nf", "firing"),
        (50.0, "nf", "resolved"),
    ]


def test_increasing_with_consecutive_three_needs_four_samples() -> None:
    r = rule("{name: up, metric: ppl, condition: increasing, consecutive: 3}")
    assert table([r], samples(series("ppl"), [5, 6, 7])) == []
    assert table([r], samples(series("ppl"), [5, 6, 7, 8, 7])) == [(30.0, "up", "firing"), (40.0, "up", "resolved")]


def test_increasing_streak_is_broken_by_a_flat_or_nan_value() -> None:
    r = rule("{name: up, metric: ppl, condition: increasing, consecutive: 2}")
    assert table([r], samples(series("ppl"), [1, 2, 2, 3, NAN, 4, 5, 6])) == [(70.0, "up", "firing")]


def test_decreasing_with_min_delta() -> None:
    r = rule("{name: down, metric: acc, condition: {decreasing: {min_delta: 0.1}}}")
    assert table([r], samples(series("acc"), [0.9, 0.85, 0.7])) == [(20.0, "down", "firing")]


def test_spike_up_against_the_median_of_n_samples() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 5 samples}}}")
    data = samples(series(), [1, 1, 1, 1, 1, 1.9, 2.0])
    assert table([r], data) == [(60.0, "s", "firing")]


def test_spike_has_no_baseline_before_min_samples() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 50 samples}}}")
    assert table([r], samples(series(), [1, 1, 1, 1, 10])) == []  # Four values: no baseline yet.
    assert table([r], samples(series(), [1, 1, 1, 1, 1, 10])) == [(50.0, "s", "firing")]


def test_nan_inside_the_baseline_is_left_out() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 6 samples, stat: mean}}}")
    # With NaN counted the mean would be NaN and nothing could fire; without it the mean is 1.
    data = samples(series(), [1, 1, NAN, 1, 1, 1, 2.5])
    assert table([r], data) == [(60.0, "s", "firing")]


def test_spike_baseline_needs_finite_samples_not_just_samples() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 6 samples}}}")
    data = samples(series(), [1, NAN, NAN, 1, 1, 1, 5])  # Only four finite values in the window.
    assert table([r], data) == []


def test_a_nonfinite_latest_value_is_not_a_spike() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 5 samples}}}")
    assert table([r], samples(series(), [1, 1, 1, 1, 1, INF, NAN])) == []


def test_spike_down_over_a_duration_baseline() -> None:
    r = rule("{name: tput, metric: tps, condition: {spike: {ratio: 0.5, direction: down, baseline: 60s}}}")
    data = samples(series("tps"), [1000, 1000, 1000, 1000, 1000, 1000, 1000, 600, 500, 1000])
    # At 80s the window [20s, 80s) holds 1000 x5 and 600: median 1000, 500/1000 = 0.5 -> fires.
    assert table([r], data) == [(80.0, "tput", "firing"), (90.0, "tput", "resolved")]


def test_duration_baseline_forgets_old_samples() -> None:
    r = rule("{name: s, metric: loss, condition: {spike: {ratio: 2.0, baseline: 30s, stat: mean}}}")
    # Samples every 10s: at 90s the 30s window holds only 60s..80s (three values), below min_samples 5.
    data = samples(series(), [1] * 9 + [3])
    assert table([r], data) == []


def test_absent_fires_after_the_duration_and_resolves_on_a_new_sample() -> None:
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    key = series()
    data = samples(key, [1, 2]) + samples(key, [3], start=200)
    assert table([r], data, until=259) == [(70.0, "gone", "firing"), (200.0, "gone", "resolved")]
    assert table([r], data, until=260)[-1] == (260.0, "gone", "firing")


def test_absent_is_not_true_for_a_series_never_seen() -> None:
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    other = samples(series("other"), [1, 2, 3], every=100)
    assert table([r], other, until=1000) == []


def test_a_sample_exactly_at_the_deadline_keeps_a_series_present() -> None:
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    assert table([r], samples(series(), [1, 2], every=60), until=119) == []


def test_absent_stops_once_the_run_is_known_finished() -> None:
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    key = series(run="r1", source="wb")
    done = series("run.finished", run="r1", source="wb")
    data = samples(key, [1, 2]) + samples(done, [1.0], start=30)
    assert table([r], data, until=1000) == []


def test_a_run_finished_after_a_stall_was_stalled_until_then() -> None:
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    key = series(run="r1", source="wb")
    done = series("run.finished", run="r1", source="wb")
    data = samples(key, [1, 2]) + samples(done, [1.0], start=500)
    assert table([r], data, until=1000) == [(70.0, "gone", "firing"), (500.0, "gone", "resolved")]


def test_a_trainer_restarted_under_a_new_pid_is_not_stalled() -> None:
    # TensorBoard names the writer's host and pid: after a restart from a checkpoint the same metric
    # arrives under a new pid. The old series is superseded, not absent.
    r = rule("{name: gone, metric: loss, condition: {absent: 60s}}")
    old = series(run="r1", pid="100", host="n1")
    new = series(run="r1", pid="200", host="n1")
    data = samples(old, [1, 2, 3]) + samples(new, [2.5, 2.4, 2.3, 2.2, 2.1, 2.0, 1.9, 1.8], start=40)
    assert table([r], data, until=150) == []
    assert table([r], data, until=200) == [(170.0, "gone", "firing")]  # The new writer stopped too.
