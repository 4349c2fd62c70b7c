"""An instant query's answer (`/api/v1/query`) as samples: pure, no I/O; every shape checked.

Success: `{"status": "success", "data": {"resultType": "vector" | "scalar", "result": ...}}`, a vector being
`[{"metric": {"__name__": ..., labels}, "value": [<unix seconds>, "<value>"]}, ...]` and a scalar
`[<unix seconds>, "<value>"]`. Values are strings in Go's float syntax: `"12"`, `"0.5"`, `"1e+06"`, `"NaN"`,
`"+Inf"`, `"-Inf"`. A `matrix` (a range selector `x[5m]` outside a function) or `string` result, a native
histogram (`"histogram"` in place of `"value"`), a series without a name when the query names no `metric`,
more than `max_series` series, or two series that would be one once `__name__` is dropped: `AnswerError`.

Labels: the series' own, less `__name__`, plus `source` (the source's name: a series' own `source` label is
kept as `exported_source`, as Prometheus renames a target's clashing labels), plus the query's `labels`
(which win over the series' own).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from alertd.model import Sample, SeriesKey, make_labels

_VALUE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN)")


class AnswerError(ValueError):
    """The answer is not a usable instant-query result (the message says why, without the query)."""


class TooManySeries(AnswerError):
    """The answer has more series than the query's `max_series`."""


class PromError(AnswerError):
    """Prometheus answered `{"status": "error", "errorType": ..., "error": ...}`."""

    def __init__(self, error_type: str, error: str) -> None:
        self.error_type = error_type
        self.error = error
        super().__init__(f"{error_type}: {error}" if error_type else error)


def error_of(body: bytes) -> PromError | None:
    """Prometheus' error in an answer (of any HTTP status), or None when the body is not one."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("status") != "error":
        return None
    kind, text = doc.get("errorType"), doc.get("error")
    return PromError(str(kind)[:100] if kind else "", str(text)[:500] if text is not None else "no message")


def parse_value(raw: object) -> float:
    """A sample's value as Prometheus writes it (a string; a bare number is taken too)."""
    if isinstance(raw, str) and _VALUE.fullmatch(raw):
        return float(raw)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    raise AnswerError(f"a value is not a number: {str(raw)[:40]!r}")


def parse_time(raw: object) -> float:
    """A sample's time: Unix seconds, a JSON number."""
    if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw) and raw >= 0:
        return float(raw)
    raise AnswerError(f"a timestamp is not a time: {str(raw)[:40]!r}")


def _pair(raw: object) -> tuple[float, float]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise AnswerError("a sample is not [time, value]")
    return parse_time(raw[0]), parse_value(raw[1])


def _data(body: bytes) -> dict[str, Any]:
    """The `data` of a successful answer; AnswerError (or the answer's own error) otherwise."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise AnswerError("the answer is nested too deeply") from None
    except ValueError:
        raise AnswerError("the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise AnswerError("the answer is not a JSON object")
    if doc.get("status") == "error":
        err = error_of(body)
        assert err is not None
        raise err
    if doc.get("status") != "success":
        raise AnswerError("the answer has no status success")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise AnswerError("the answer has no data")
    return data


def samples_of(
    body: bytes,
    *,
    source: str,
    metric: str | None,
    labels: Mapping[str, str],
    max_series: int,
) -> list[Sample]:
    """The samples of one instant query's answer. AnswerError says what is wrong with it."""
    data = _data(body)
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        if metric is None:
            raise AnswerError("a scalar has no name: give the query a metric")
        t, v = _pair(result)
        return [Sample(SeriesKey(metric, make_labels({**labels, "source": source})), t, None, v)]
    if kind in ("matrix", "string"):
        hint = " (a range selector such as x[5m] needs a function around it: rate, avg_over_time)"
        raise AnswerError(f"a {kind} result; only instant vectors and scalars are read" + hint * (kind == "matrix"))
    if kind != "vector":
        raise AnswerError(f"an unknown result type {str(kind)[:40]!r}")
    if not isinstance(result, list):
        raise AnswerError("the vector's result is not a list")
    if len(result) > max_series:
        raise TooManySeries(f"{len(result)} series, more than max_series ({max_series}): narrow the query or raise it")
    out: list[Sample] = []
    seen: set[SeriesKey] = set()
    for element in result:
        key = _series(element, source, metric, labels)
        if key in seen:
            raise AnswerError(f"two series are one once __name__ is dropped: {str(key)[:200]}")
        seen.add(key)
        if not isinstance(element, dict) or "value" not in element:
            raise AnswerError("a series has no value (a native histogram? read it with histogram_quantile)")
        t, v = _pair(element["value"])
        out.append(Sample(key, t, None, v))
    return out


def _series(element: Any, source: str, metric: str | None, extra: Mapping[str, str]) -> SeriesKey:
    if not isinstance(element, dict) or not isinstance(element.get("metric", {}), dict):
        raise AnswerError("a series is not {metric, value}")
    own: dict[str, Any] = element.get("metric", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in own.items()):
        raise AnswerError("a series' labels are not strings")
    name = metric or own.get("__name__")
    if not name:
        raise AnswerError("a series has no __name__ (a function or an aggregation drops it): give the query a metric")
    out = {k: v for k, v in own.items() if k != "__name__"}
    if "source" in out:
        out["exported_source"] = out.pop("source")
    out.update(extra)
    out["source"] = source
    return SeriesKey(name, make_labels(out))
