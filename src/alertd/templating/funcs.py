"""The Prometheus template functions, with Prometheus' exact output (prometheus/template/template.go).

`humanize`, `humanize1024`, `humanizeDuration`, `humanizePercentage`, `humanizeTimestamp`, `title`,
`toUpper`, `toLower` and `printf`. Each takes a number or a string that parses as one (as Prometheus'
`convertToFloat` does); anything else is a `ValueError` naming the function. Go's `%.4g` is Python's
`.4g` except for NaN and the infinities, which Go writes `NaN`, `+Inf` and `-Inf`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

MAX_FORMAT_WIDTH = 200
"""The widest field (width or precision) a `printf` or `%` format may ask for."""


def to_float(value: Any, func: str) -> float:
    """`value` as a float: a number, or a string holding one; ValueError naming `func` otherwise."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{func}: {value!r} is not a number")


def go_g(value: float, precision: int = 4) -> str:
    """Go's `%.<precision>g`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.{precision}g}"


def humanize(value: Any) -> str:
    """SI prefixes, 4 significant digits: 1234567 -> `1.235M`, 0.001234 -> `1.234m`."""
    v = to_float(value, "humanize")
    if v == 0 or math.isnan(v) or math.isinf(v):
        return go_g(v)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix = p
            v /= 1000
        return go_g(v) + prefix
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return go_g(v) + prefix


def humanize1024(value: Any) -> str:
    """Binary prefixes: 1048576 -> `1Mi`."""
    v = to_float(value, "humanize1024")
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return go_g(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix = p
        v /= 1024
    return go_g(v) + prefix


def humanize_duration(value: Any) -> str:
    """Seconds as a duration: 3661 -> `1h 1m 1s`, 1.5 -> `1.5s`, 0.0012 -> `1.2ms`."""
    v = to_float(value, "humanizeDuration")
    if math.isnan(v) or math.isinf(v):
        return go_g(v)
    if v == 0:
        return go_g(v) + "s"
    if abs(v) >= 1:
        sign = ""
        if v < 0:
            sign, v = "-", -v
        whole = int(v)
        seconds, minutes, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{go_g(v)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return f"{go_g(v)}{prefix}s"


def humanize_percentage(value: Any) -> str:
    """A ratio as a percentage: 0.1234 -> `12.34%`."""
    return go_g(to_float(value, "humanizePercentage") * 100) + "%"


def humanize_timestamp(value: Any) -> str:
    """Unix seconds as Go prints a UTC time: 1435065584.128 -> `2015-06-23 13:19:44.128 +0000 UTC`."""
    v = to_float(value, "humanizeTimestamp")
    if math.isnan(v) or math.isinf(v):
        return go_g(v)
    nanos = int(v * 1e9)
    seconds, frac = divmod(nanos, 1_000_000_000)
    try:
        when = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"humanizeTimestamp: {v!r} is out of range") from None
    fraction = f".{frac:09d}".rstrip("0") if frac else ""
    return when.strftime("%Y-%m-%d %H:%M:%S") + fraction + " +0000 UTC"


def _separator(ch: str) -> bool:
    if ch.isascii():
        return not (ch.isalnum() or ch == "_")
    if unicodedata.category(ch)[0] in ("L", "N"):
        return False
    return ch.isspace()


def title(value: Any) -> str:
    """Go's `strings.Title`: the first letter of every word upper-cased, the rest left as they are."""
    text = str(value)
    out = []
    prev = " "
    for ch in text:
        out.append(ch.upper() if _separator(prev) else ch)
        prev = ch
    return "".join(out)


def to_upper(value: Any) -> str:
    """Go's `strings.ToUpper`."""
    return str(value).upper()


def to_lower(value: Any) -> str:
    """Go's `strings.ToLower`."""
    return str(value).lower()


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+))?([a-zA-Z%])")


def check_format(fmt: str) -> None:
    """Refuse a format asking for a field wider than MAX_FORMAT_WIDTH (or a `*` width)."""
    if "*" in fmt:
        raise ValueError("a '*' width or precision is not allowed in a format")
    for m in _VERB.finditer(fmt):
        for n in (m.group(2), m.group(3)):
            if n is not None and int(n) > MAX_FORMAT_WIDTH:
                raise ValueError(f"a format field wider than {MAX_FORMAT_WIDTH} is not allowed ({m.group(0)!r})")


def go_value(value: Any) -> str:
    """Go's `%v`: floats in their shortest form (`NaN`, `+Inf`), others as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return go_g(value)
        text = repr(value)
        return text[:-2] if text.endswith(".0") and "e" not in text else text
    if value is None:
        return "<nil>"
    return str(value)


def printf(fmt: Any, *args: Any) -> str:
    """Go's `printf` for the common verbs: %s %v %d %f %e %g %x %X %o %q %t %%, with flags, width, precision."""
    fmt = str(fmt)
    check_format(fmt)
    out: list[str] = []
    pos = 0
    rest = list(args)
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2) or "", m.group(3), m.group(4)
        if verb == "%":
            out.append("%")
            continue
        if not rest:
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = rest.pop(0)
        spec = f"%{flags}{width}" + (f".{prec}" if prec is not None else "")
        out.append(_one_verb(spec, verb, arg))
    out.append(fmt[pos:])
    if rest:
        out.append("%!(EXTRA " + ", ".join(go_value(a) for a in rest) + ")")
    return "".join(out)


def _one_verb(spec: str, verb: str, arg: Any) -> str:
    try:
        if verb in ("s", "v"):
            return (spec + "s") % go_value(arg)
        if verb == "q":
            return (spec + "s") % json.dumps(str(arg), ensure_ascii=False)
        if verb == "t":
            return (spec + "s") % go_value(bool(arg))
        if verb in ("d", "x", "X", "o", "b"):
            if isinstance(arg, float) and not arg.is_integer():
                raise TypeError
            n = int(to_float(arg, "printf")) if not isinstance(arg, int) else arg
            return format(n, "b") if verb == "b" else (spec + verb) % n
        if verb in ("f", "F", "e", "E", "g", "G"):
            v = to_float(arg, "printf")
            if math.isnan(v) or math.isinf(v):
                return (spec.replace("0", "") + "s") % go_g(v)
            return (spec + verb) % v
    except (TypeError, ValueError, OverflowError):
        pass
    return f"%!{verb}({type(arg).__name__}={go_value(arg)})"


FUNCTIONS = {
    "humanize": humanize,
    "humanize1024": humanize1024,
    "humanizeDuration": humanize_duration,
    "humanizePercentage": humanize_percentage,
    "humanizeTimestamp": humanize_timestamp,
    "title": title,
    "toUpper": to_upper,
    "toLower": to_lower,
}
"""The one-argument functions: filters (`x | humanize`), calls (`humanize(x)`) and Go calls (`humanize x`)."""
