"""The series notation of `promtool test rules` (PromQL's series descriptions), as alertd reads it.

Values (`values:` and alertd's `steps:`), separated by spaces:

    1.5  -2  NaN  Inf  -Inf  1e3  1_000   a number (NaN and Inf in any case)
    _                                     no sample in this slot
    stale                                 a stale marker: the series ends here (see the runner)
    a+bxN   a-bxN                         a, then N more values, each b more (less) than the one before:
                                          `1+1x3` = 1 2 3 4; the sum is taken step by step, as Prometheus does
    axN                                   a, N+1 times (`a+0xN`)
    _xN                                   N empty slots (not N+1: `1 _x3 stale` = 1 _ _ _ stale)
    stalexN  NaNxN  InfxN                 alertd's: N+1 of them (promtool's lexer reads `stalex2` as one
                                          word and rejects it; checked with promtool 2.42)

Series: `name{label="value", ...}` where the name may hold alertd's `/` and `.` (`train/loss`), or
Prometheus 3's `{"train/loss", run="a"}` and `{__name__="train/loss"}`; values in double, single or back
quotes; a trailing comma is allowed.
"""

from __future__ import annotations

import re
from typing import Final

from alertd.model import SeriesKey, make_labels


class StaleMarker:
    """The `stale` marker's type (one instance: STALE)."""

    _instance: StaleMarker | None = None

    def __new__(cls) -> StaleMarker:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "STALE"


STALE: Final = StaleMarker()
"""A slot holding a stale marker."""

Value = float | None | StaleMarker
"""One slot of a series: a number, None (`_`: no sample) or STALE."""

MAX_VALUES = 1_000_000
"""The most slots one `values`/`steps` text may expand to (`1x999999999999` is an error, not a hang)."""

_NUM = r"(?:\d+(?:_\d+)*(?:\.(?:\d+(?:_\d+)*)?)?|\.\d+(?:_\d+)*)(?:[eE][-+]?\d+)?|[Ii][Nn][Ff]|[Nn][Aa][Nn]"
_TOKEN = re.compile(
    rf"(?:(?P<blank>_)|(?P<stale>stale)|(?P<a>[-+]?(?:{_NUM}))(?:(?P<op>[-+])(?P<b>{_NUM}))?)(?:x(?P<n>\d+))?"
)
_HELP = "use numbers, NaN, Inf, _, stale, a+bxN, a-bxN, axN, _xN or stalexN"


def _number(text: str) -> float:
    return float(text.replace("_", ""))


def expand_values(text: object, limit: int = MAX_VALUES) -> list[Value]:
    """Expand the series notation into slots; raise ValueError naming the token that can't be read."""
    out: list[Value] = []
    for token in str(text).split():
        m = _TOKEN.fullmatch(token)
        if not m:
            raise ValueError(f"can't read {token!r}: {_HELP}")
        n = m.group("n")
        count = 1 if n is None else int(n) + (0 if m.group("blank") else 1)  # `_xN` is N slots, `axN` N+1
        if len(out) + count > limit:
            raise ValueError(f"{token!r} makes more than {limit:,} values")
        if m.group("blank"):
            out.extend([None] * count)
        elif m.group("stale"):
            out.extend([STALE] * count)
        elif m.group("op") is None:
            out.extend([_number(m.group("a"))] * count)
        elif n is None:
            raise ValueError(f"can't read {token!r}: an increment needs a count (a+bxN)")
        else:
            value, delta = _number(m.group("a")), _number(m.group("b"))
            if m.group("op") == "-":
                delta = -delta
            for _ in range(count):
                out.append(value)
                value += delta
    return out


_NAME = re.compile(r"[^{}\s\"'`,=]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def parse_series(text: str) -> SeriesKey:
    """`train/loss{run="exp1"}` (or `{"train/loss", run="exp1"}`) as a SeriesKey; ValueError if unreadable."""
    s = str(text).strip()
    pos, name = 0, ""
    m = _NAME.match(s)
    if m:
        name, pos = m.group(0), m.end()
    labels: dict[str, str] = {}
    pos = _skip(s, pos)
    if pos < len(s):
        if s[pos] != "{":
            raise ValueError(f'can\'t read series {text!r} at {s[pos:]!r}: write name{{label="value", ...}}')
        pos = _labels(s, pos + 1, labels, text)
        if _skip(s, pos) != len(s):
            raise ValueError(f"can't read series {text!r}: {s[pos:]!r} after the closing brace")
    if "__name__" in labels:
        if name and labels["__name__"] != name:
            raise ValueError(f"series {text!r} has two names: {name!r} and __name__={labels['__name__']!r}")
        name = labels.pop("__name__")
    if not name:
        raise ValueError(f"series {text!r} has no metric name")
    return SeriesKey(name, make_labels(labels))


def _skip(s: str, pos: int) -> int:
    while pos < len(s) and s[pos].isspace():
        pos += 1
    return pos


def _labels(s: str, pos: int, labels: dict[str, str], text: str) -> int:
    """Read `label="value", ...}` from `pos` (just after the `{`) into `labels`; return the end."""
    while True:
        pos = _skip(s, pos)
        if pos >= len(s):
            raise ValueError(f"can't read series {text!r}: no closing brace")
        if s[pos] == "}":
            return pos + 1
        if s[pos] in "\"'`":
            key, pos = _quoted(s, pos, text)
        else:
            m = _IDENT.match(s, pos)
            if not m:
                raise ValueError(f"can't read the labels of {text!r} at {s[pos:]!r}")
            key, pos = m.group(0), m.end()
        pos = _skip(s, pos)
        if pos < len(s) and s[pos] in ",}":  # A quoted name alone: Prometheus 3's {"metric.name", ...}
            if "__name__" in labels:
                raise ValueError(f"series {text!r} has two names")
            labels["__name__"] = key
        else:
            if pos >= len(s) or s[pos] != "=":
                raise ValueError(f"can't read the labels of {text!r} at {s[pos:]!r}: expected '='")
            pos = _skip(s, pos + 1)
            if pos >= len(s) or s[pos] not in "\"'`":
                raise ValueError(f"can't read the labels of {text!r} at {s[pos:]!r}: a value is quoted")
            value, pos = _quoted(s, pos, text)
            if key in labels:
                raise ValueError(f"series {text!r} has the label {key!r} twice")
            labels[key] = value
            pos = _skip(s, pos)
        if pos < len(s) and s[pos] == ",":
            pos += 1
        elif pos < len(s) and s[pos] != "}":
            raise ValueError(f"can't read the labels of {text!r} at {s[pos:]!r}: expected ',' or '}}'")


def _quoted(s: str, pos: int, text: str) -> tuple[str, int]:
    """The string quoted at `pos` (Go's escapes in double and single quotes, none in back quotes)."""
    quote, pos = s[pos], pos + 1
    out: list[str] = []
    while pos < len(s):
        c = s[pos]
        if c == quote:
            return "".join(out), pos + 1
        if c == "\\" and quote != "`":
            nxt = s[pos + 1 : pos + 2]
            if nxt == quote or nxt in _ESCAPES:
                out.append(_ESCAPES.get(nxt, nxt))
                pos += 2
                continue
            width = {"x": 2, "u": 4, "U": 8}.get(nxt)
            digits = s[pos + 2 : pos + 2 + width] if width else ""
            if width and len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
                out.append(chr(int(digits, 16)) if int(digits, 16) <= 0x10FFFF else "\ufffd")
                pos += 2 + width
                continue
            raise ValueError(f"can't read {text!r}: unknown escape \\{nxt}")
        out.append(c)
        pos += 1
    raise ValueError(f"can't read {text!r}: a quote is not closed")
