"""Durations as written in rules files: `90s`, `5m`, `1h30m`, `250ms`, `2d`, or a number of seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str | float | int) -> float:
    """Return the duration in seconds, or raise ValueError with a message a user can act on."""
    if isinstance(text, bool):
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {text!r}")
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise ValueError(f"a duration must be a finite number of seconds, got {text}")
        if text < 0:
            raise ValueError(f"a duration can't be negative, got {text}")
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {text!r}")
    s = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"expected a duration such as 30s, 5m or 1h30m, got {text!r}")
    return total


def format_duration(seconds: float) -> str:
    """The shortest readable form: 1800 -> `30m`, 5400 -> `1h30m`, 0.25 -> `250ms`."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    out = []
    rest = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)
