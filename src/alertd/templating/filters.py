"""alertd's own filters (Go's number text, bounded string filters, `printf`) and the wrapper that counts a
filter's or test's work against the render's budget."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context

from alertd.templating import funcs
from alertd.templating.bounds import MAX_STRING, budget, check_replace, check_width, interleave, sized, too_long
from alertd.templating.jinja_compat import DEFAULT_FILTERS, passed_first
from alertd.templating.labels import MISSING


class _Fixed(float):
    """A number rounded by `round(N)`: prints with exactly N decimals (`3.10`), computes as a float."""

    digits: int

    def __new__(cls, value: float, digits: int) -> _Fixed:
        self = super().__new__(cls, value)
        self.digits = digits
        return self

    def __str__(self) -> str:
        return f"{float(self):.{self.digits}f}"


def number_text(value: float) -> str:
    """A float as alertd prints it: 6 significant digits, `NaN`, `+Inf`, `-Inf`."""
    return str(value) if isinstance(value, _Fixed) else funcs.go_g(value, 6)


def finalize(value: Any) -> Any:
    """What `{{ x }}` prints for `x`: a float as `number_text`, None as `<no value>`."""
    if isinstance(value, float):
        return number_text(value)
    if value is None:
        return MISSING
    return value


def _text(value: Any) -> str:
    return number_text(value) if isinstance(value, float) else str(finalize(value))


def _round(value: Any, precision: int = 0, method: str = "common") -> Any:
    if isinstance(value, float) and math.isfinite(value) and 0 <= precision <= 20:
        return _Fixed(round(value, precision), precision)
    return value


def _upper(value: Any) -> str:
    return _text(value).upper()


def _lower(value: Any) -> str:
    return _text(value).lower()


def _replace(value: Any, old: Any, new: Any, count: int | None = None) -> str:
    text, old, new = _text(value), str(old), str(new)
    check_replace(text, old, new, count)
    return text.replace(old, new, -1 if count is None else count)


def _center(value: Any, width: int = 80) -> str:
    check_width(width)
    return _text(value).center(width)


def _indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    check_width(width)
    pad = width if isinstance(width, str) else " " * int(width)
    text = _text(value)
    if len(pad) * (text.count("\n") + 1) + len(text) > MAX_STRING:
        raise too_long()
    return str(DEFAULT_FILTERS["indent"](text, width, first, blank))


def format_text(value: Any, *args: Any, **kwargs: Any) -> str:
    """`"%.2f" | format(x)` and `"%.2f" % x`: Python's `%` with the width of each field bounded."""
    fmt = _text(value)
    try:
        funcs.check_format(fmt)
    except ValueError as e:
        raise SecurityError(str(e)) from None
    return str(sized(fmt % (kwargs or args)))


def _join(value: Iterable[Any], d: str = "", attribute: str | int | None = None) -> str:
    if attribute is not None:
        raise SecurityError("join(attribute=...) is not available: map(attribute=...) first")
    return "".join(interleave((_text(v) for v in value), str(d)))


def _printf_filter(value: Any, fmt: Any, *more: Any) -> str:
    """`value | printf("%.2f")`: Go's `$value | printf "%.2f"`, the piped value last."""
    return funcs.printf(fmt, *more, value)


OWN_FILTERS: Mapping[str, Callable[..., Any]] = {
    "round": _round,
    "upper": _upper,
    "lower": _lower,
    "replace": _replace,
    "center": _center,
    "indent": _indent,
    "format": format_text,
    "join": _join,
    "printf": _printf_filter,
    **funcs.FUNCTIONS,
}
"""alertd's filters: Jinja's of the same name bounded or printing numbers as alertd does, and Prometheus'."""

REMOVED_FILTERS = ("random", "lipsum", "urlize")
"""Jinja's filters a template does not get."""

HEAVY = {name: 8 for name in ("sort", "dictsort", "unique", "groupby", "map", "select", "reject", "min", "max")}
HEAVY.update({"selectattr": 8, "rejectattr": 8, "sum": 8, "batch": 8, "slice": 8, "title": 8, "wordcount": 4})
HEAVY.update({"wordwrap": 16, "pprint": 4, "tojson": 4})
"""Filters that call Python code per item count each item this many times."""


def checked(filter_: Callable[..., Any], weight: int = 1) -> Callable[..., Any]:
    """A filter or test counting its value and arguments as work, and refusing an oversized result."""
    first = passed_first(filter_)

    @pass_context
    @functools.wraps(filter_)
    def run(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        work = budget(context)
        for _ in range(weight):
            work.handle(value)
        for item in (*args, *kwargs.values()):
            work.handle(item)
        if first is None:
            return sized(filter_(value, *args, **kwargs))
        return sized(filter_(first(context), value, *args, **kwargs))

    return run
