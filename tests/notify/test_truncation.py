"""Fitting alert lines into a service's limit, and reading Retry-After."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from alertd.notify.formats.common import Reply, cut, fit_lines, retry_after_seconds, utf8_len


def test_everything_fits_untouched() -> None:
    assert fit_lines("head", ["a", "b"], 100) == "head\na\nb"


def test_lines_that_do_not_fit_are_counted() -> None:
    text = fit_lines("head", ["x" * 10] * 20, 120)
    assert len(text) <= 120
    kept = text.count("x" * 10)
    assert text.endswith(f"… and {20 - kept} more alerts (truncated to the service's limit)")


def test_max_alerts_omissions_are_added_to_the_note() -> None:
    assert fit_lines("h", ["a"], 100, omitted=3) == "h\na\n… and 3 more alerts (truncated to the service's limit)"
    assert fit_lines("h", ["a"], 100, omitted=1).endswith("… and 1 more alert (truncated to the service's limit)")


def test_a_single_huge_line_is_cut_not_dropped() -> None:
    text = fit_lines("head", ["y" * 1000], 200)
    assert len(text) <= 200 and text.startswith("head\nyyyy") and "…" in text


def test_bytes_are_measured_where_the_service_counts_bytes() -> None:
    text = fit_lines("标题", ["告警" * 100] * 10, 500, measure=utf8_len)
    assert utf8_len(text) <= 500


@given(
    head=st.text(max_size=50),
    lines=st.lists(st.text(max_size=300), max_size=40),
    limit=st.integers(min_value=80, max_value=3000),
    omitted=st.integers(min_value=0, max_value=5),
)
def test_never_over_the_limit(head: str, lines: list[str], limit: int, omitted: int) -> None:
    assert utf8_len(fit_lines(head, lines, limit, omitted=omitted, measure=utf8_len)) <= limit
    assert len(fit_lines(head, lines, limit, omitted=omitted)) <= limit


def test_cut() -> None:
    assert cut("abcdef", 10) == "abcdef"
    assert cut("abcdef", 4) == "abc…"


def test_retry_after_forms() -> None:
    def ra(value: str) -> float | None:
        return retry_after_seconds(Reply(429, {"retry-after": value}, "", received_at=1000.0))

    assert ra("12") == 12.0
    assert ra("1.5") == 1.5
    assert ra("Thu, 01 Jan 1970 00:17:40 GMT") == 60.0  # 1060 s after the epoch, 60 s after received_at
    assert ra("Thu, 01 Jan 1970 00:00:00 GMT") == 0.0  # in the past: retry now
    assert ra("soon") is None
    assert retry_after_seconds(Reply(429, {}, "")) is None
