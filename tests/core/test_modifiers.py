"""Time tables for the modifiers: consecutive, for, keep_firing_for; and the alert state machine."""

from __future__ import annotations

from core_helpers import NAN, rule, samples, series, table


def test_for_goes_pending_then_fires_exactly_when_the_duration_is_reached() -> None:
    r = rule("{name: cold, metric: util, condition: '< 40', for: 30m}")
    data = samples(series("util"), [90] + [10] * 40, every=60)
    assert table([r], data) == [(60.0, "cold", "pending"), (1860.0, "cold", "firing")]


def test_for_fires_between_samples_when_time_alone_passes() -> None:
    r = rule("{name: cold, metric: util, condition: '< 40', for: 5m}")
    data = samples(series("util"), [10], every=60)  # One sample, then silence.
    assert table([r], data, until=299) == [(0.0, "cold", "pending")]
    assert table([r], data, until=300) == [(0.0, "cold", "pending"), (300.0, "cold", "firing")]


def test_a_pending_alert_that_stops_matching_goes_inactive_without_firing() -> None:
    r = rule("{name: cold, metric: util, condition: '< 40', for: 5m}")
    data = samples(series("util"), [10, 10, 90], every=60)
    assert table([r], data, until=3600) == [(0.0, "cold", "pending"), (120.0, "cold", "inactive")]


def test_the_value_at_the_for_boundary_decides() -> None:
    r = rule("{name: cold, metric: util, condition: '< 40', for: 120s}")
    # At 120s the alert would fire, but the sample at 120s says the GPU is busy again.
    data = samples(series("util"), [10, 10, 90], every=60)
    assert table([r], data, until=500) == [(0.0, "cold", "pending"), (120.0, "cold", "inactive")]


def test_keep_firing_for_holds_a_firing_alert_then_resolves() -> None:
    r = rule("{name: hot, metric: temp, condition: '> 83', keep_firing_for: 2m}")
    data = samples(series("temp"), [90, 70, 70, 70, 70], every=60)
    assert table([r], data) == [(0.0, "hot", "firing"), (180.0, "hot", "resolved")]


def test_keep_firing_for_is_reset_when_the_condition_returns() -> None:
    r = rule("{name: hot, metric: temp, condition: '> 83', keep_firing_for: 2m}")
    data = samples(series("temp"), [90, 70, 90, 70, 70, 70, 70], every=60)
    assert table([r], data) == [(0.0, "hot", "firing"), (300.0, "hot", "resolved")]


def test_consecutive_counts_samples_and_resets_on_a_false_one() -> None:
    r = rule("{name: big, metric: g, condition: '> 100', consecutive: 3}")
    data = samples(series("g"), [200, 200, 50, 200, 200, 200, 10])
    assert table([r], data) == [(50.0, "big", "firing"), (60.0, "big", "resolved")]


def test_consecutive_and_for_together() -> None:
    r = rule("{name: big, metric: g, condition: '> 100', consecutive: 2, for: 30s}")
    data = samples(series("g"), [200, 200, 200, 200, 200])
    assert table([r], data) == [(10.0, "big", "pending"), (40.0, "big", "firing")]


def test_one_alert_per_rule_and_series() -> None:
    r = rule("{name: nf, metric: '*loss', condition: nonfinite}")
    a, b = series("train/loss", run="a"), series("train/loss", run="b")
    data = samples(a, [NAN, NAN]) + samples(b, [1, NAN], start=1)
    assert table([r], data) == [(0.0, "nf", "firing"), (11.0, "nf", "firing")]


def test_metric_globs_and_label_matchers_select_series() -> None:
    r = rule("{name: nf, metric: ['*loss', exact], labels_match: {run: '=~prod-.*'}, condition: nonfinite}")
    data = (
        samples(series("train/loss", run="prod-1"), [NAN])
        + samples(series("train/loss", run="dev-1"), [NAN], start=1)
        + samples(series("exact", run="prod-2"), [NAN], start=2)
        + samples(series("loss_scale", run="prod-1"), [NAN], start=3)
    )
    assert table([r], data) == [(0.0, "nf", "firing"), (2.0, "nf", "firing")]


def test_negative_label_matchers() -> None:
    r = rule("{name: nf, metric: loss, labels_match: {run: '!=skip', host: '!~gpu-9.*'}, condition: nonfinite}")
    data = (
        samples(series("loss", run="skip"), [NAN])
        + samples(series("loss", run="keep", host="gpu-1"), [NAN], start=1)
        + samples(series("loss", run="keep", host="gpu-99"), [NAN], start=2)
    )
    assert table([r], data) == [(1.0, "nf", "firing")]
