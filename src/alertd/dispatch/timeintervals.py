"""Alertmanager's time intervals (`timeinterval/timeinterval.go`), evaluated at a time given as an argument.

A named interval holds a list of periods; the time is in the interval when it is in any period. A period
is in when every field it sets holds (an unset field holds always): `times` (`start_time` inclusive,
`end_time` exclusive, `HH:MM`, end up to `24:00`), `weekdays` (`monday:friday`), `days_of_month`
(`1:7`, `-3:-1` counts from the month's end, inclusive), `months` (`january:march` or `1:3`), `years`
(`2026:2027`), all ranges inclusive, all read in `location` (an IANA zone, UTC when unset).

A route with `mute_time_intervals` sends nothing while `now` is in any of them; one with
`active_time_intervals` sends only while `now` is in one of them. As in Alertmanager, a muted flush is
dropped, not postponed: a firing alert is sent at the group's first flush after the mute (it was never
logged as sent), and an alert that resolved during the mute is not announced as resolved.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_WEEKDAYS = {d: i for i, d in enumerate(["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"])}
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_TIME = re.compile(r"^(\d{2}):(\d{2})$")

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Period:
    """One entry of a time interval's list; None fields hold always. `times` are minutes of the day."""

    times: tuple[Range, ...] | None = None
    weekdays: tuple[Range, ...] | None = None
    days_of_month: tuple[Range, ...] | None = None
    months: tuple[Range, ...] | None = None
    years: tuple[Range, ...] | None = None
    location: str = "UTC"

    def contains(self, now: float) -> bool:
        """Whether the instant `now` (epoch seconds) is in this period (Alertmanager's `ContainsTime`)."""
        zone = UTC if self.location == "UTC" else ZoneInfo(self.location)
        t = datetime.fromtimestamp(now, tz=zone)
        minute = t.hour * 60 + t.minute
        if self.times is not None and not any(a <= minute < b for a, b in self.times):
            return False
        if self.days_of_month is not None and not _in_days(t, self.days_of_month):
            return False
        if self.months is not None and not any(a <= t.month <= b for a, b in self.months):
            return False
        weekday = (t.weekday() + 1) % 7  # Go: Sunday is 0
        if self.weekdays is not None and not any(a <= weekday <= b for a, b in self.weekdays):
            return False
        return self.years is None or any(a <= t.year <= b for a, b in self.years)


def _in_days(t: datetime, ranges: Sequence[Range]) -> bool:
    days = calendar.monthrange(t.year, t.month)[1]
    for begin, end in ranges:
        b = days + begin + 1 if begin < 0 else begin
        e = days + end + 1 if end < 0 else end
        if b > days:
            continue
        b, e = max(-days, min(b, days)), max(-days, min(e, days))
        if b <= t.day <= e:
            return True
    return False


def in_any(intervals: Mapping[str, Sequence[Period]], names: Sequence[str], now: float) -> str | None:
    """The first of `names` whose interval contains `now`, or None."""
    for name in names:
        if any(p.contains(now) for p in intervals.get(name, ())):
            return name
    return None


# --- parsing (the rules file's strings -> ranges); errors are ValueErrors naming the bad text ---


def parse_time(text: str) -> int:
    """`HH:MM` as minutes of the day (00:00 to 24:00)."""
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a time HH:MM")
    hours, minutes = int(m.group(1)), int(m.group(2))
    if minutes > 59 or hours > 24 or (hours == 24 and minutes):
        raise ValueError(f"{text!r} is not a time between 00:00 and 24:00")
    return hours * 60 + minutes


def parse_times(items: Sequence[Mapping[str, str]]) -> tuple[Range, ...]:
    """`[{start_time: "09:00", end_time: "17:00"}]`: start inclusive, end exclusive, start before end."""
    out = []
    for item in items:
        if set(item) != {"start_time", "end_time"}:
            raise ValueError("each times entry needs start_time and end_time, and nothing else")
        start, end = parse_time(str(item["start_time"])), parse_time(str(item["end_time"]))
        if start >= end:
            raise ValueError(f"start_time {item['start_time']} must be before end_time {item['end_time']}")
        out.append((start, end))
    return tuple(out)


def _parse_ranges(
    items: Sequence[str | int], one: Callable[[str], int], what: str, *, ordered: bool = True
) -> tuple[Range, ...]:
    """`first:last` or `one` items, each end parsed by `one`; with `ordered`, first must not be after last."""
    out = []
    for item in items:
        first, sep, second = str(item).strip().lower().partition(":")
        try:
            a = one(first)
            b = one(second) if sep else a
        except (KeyError, ValueError):
            raise ValueError(f"{item!r} is not a {what} or a range of them (first:last)") from None
        if ordered and a > b:
            raise ValueError(f"{item!r}: the first {what} must not be after the last")
        out.append((a, b))
    return tuple(out)


def _in_range(low: int, high: int) -> Callable[[str], int]:
    def number(s: str) -> int:
        n = int(s)
        if not low <= n <= high:
            raise ValueError(s)
        return n

    return number


def parse_weekdays(items: Sequence[str]) -> tuple[Range, ...]:
    """`monday:friday`, `saturday`: Sunday is 0, as in Go; a range must not wrap."""
    return _parse_ranges(items, lambda s: _WEEKDAYS[s], "weekday")


def parse_months(items: Sequence[str | int]) -> tuple[Range, ...]:
    """`january:march`, `1:3`, `december`."""
    return _parse_ranges(items, lambda s: _in_range(1, 12)(s) if s.isdigit() else _MONTHS[s], "month")


def parse_days_of_month(items: Sequence[str | int]) -> tuple[Range, ...]:
    """`1:7`, `-1` (the last day), `-7:-1`: 1 to 31 or -31 to -1, checked as Alertmanager checks them."""

    def day(s: str) -> int:
        n = _in_range(-31, 31)(s)
        if n == 0:
            raise ValueError(s)
        return n

    out = _parse_ranges(items, day, "day of the month (1 to 31, or -31 to -1 from the month's end)", ordered=False)
    for (a, b), item in zip(out, items, strict=True):
        if a < 0 < b:
            raise ValueError(f"{item!r}: the last day must be negative when the first is")
        if (28 + a if a < 0 else a) > (28 + b if b < 0 else b):  # Alertmanager's check, on a 28-day month
            raise ValueError(f"{item!r}: the last day is always before the first")
    return out


def parse_years(items: Sequence[str | int]) -> tuple[Range, ...]:
    """`2026`, `2026:2028`."""
    return _parse_ranges(items, _in_range(1, 9999), "year")


def parse_location(name: str) -> str:
    """An IANA time zone (`Europe/Berlin`), `UTC`; checked now so a typo is a config error."""
    if name in ("", "UTC"):
        return "UTC"
    if name == "Local":
        raise ValueError("location Local depends on the machine: name the zone (e.g. Europe/Berlin)")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None
    return name
