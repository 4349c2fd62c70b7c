"""The rules-file models of `route:` and `inhibit_rules:`, and their converters to core objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from alertd.dispatch import timeintervals as ti
from alertd.dispatch.matchers import Matcher, equality_matchers, parse_matchers
from alertd.dispatch.routes import InhibitRule, Route, child_key
from alertd.schema.types import Duration, Strict
from alertd.userregex import compile_user_regex


def _parse_matcher_list(value: list[str]) -> list[str]:
    for i, text in enumerate(value):
        try:
            parse_matchers(text)
        except ValueError as exc:
            raise ValueError(f"matchers[{i}]: {exc}") from None
    return value


def _matchers(items: list[str]) -> tuple[Matcher, ...]:
    return tuple(m for text in items for m in parse_matchers(text))


Periods = dict[str, tuple[ti.Period, ...]]


def _checked(parse: Callable[[Any], object]) -> Callable[[_T], _T]:
    """A field validator that parses the value (a ValueError is the config error) and keeps it as given."""

    def check(value: _T) -> _T:
        if value is not None:
            parse(value)
        return value

    return check


class PeriodConfig(Strict):
    """One entry of a named time interval, in Alertmanager's syntax (`alertd.dispatch.timeintervals`)."""

    times: list[dict[str, str]] | None = None
    weekdays: list[str] | None = None
    days_of_month: list[str | int] | None = None
    months: list[str | int] | None = None
    years: list[str | int] | None = None
    location: str | None = None

    _times = field_validator("times")(_checked(ti.parse_times))
    _weekdays = field_validator("weekdays")(_checked(ti.parse_weekdays))
    _days = field_validator("days_of_month")(_checked(ti.parse_days_of_month))
    _months = field_validator("months")(_checked(ti.parse_months))
    _years = field_validator("years")(_checked(ti.parse_years))
    _location = field_validator("location")(_checked(ti.parse_location))

    def to_period(self) -> ti.Period:
        """The core `Period`."""
        return ti.Period(
            times=None if self.times is None else ti.parse_times(self.times),
            weekdays=None if self.weekdays is None else ti.parse_weekdays(self.weekdays),
            days_of_month=None if self.days_of_month is None else ti.parse_days_of_month(self.days_of_month),
            months=None if self.months is None else ti.parse_months(self.months),
            years=None if self.years is None else ti.parse_years(self.years),
            location=ti.parse_location(self.location or ""),
        )


class TimeIntervalConfig(Strict):
    """A top-level `time_intervals` entry: `{name, time_intervals: [...]}`, as in Alertmanager."""

    name: str = Field(min_length=1)
    time_intervals: list[PeriodConfig] = Field(default_factory=list)


def _check_regexes(value: dict[str, str]) -> dict[str, str]:
    for name, pattern in value.items():
        try:
            compile_user_regex(pattern)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return value


_T = TypeVar("_T")
_P = TypeVar("_P")


def _pick(value: _T | None, inherited: _T) -> _T:
    return inherited if value is None else value


class RouteConfig(Strict):
    """A node of the routing tree, as in Alertmanager: matchers, receivers, grouping and child routes.

    Unset values are inherited from the parent; the root's defaults are listed in `alertd.dispatch.routes`.
    `match_re` values are regular expressions anchored at both ends.
    """

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    matchers: list[str] = Field(default_factory=list)
    receiver: str | None = None
    receivers: list[str] | None = None
    mute_time_intervals: list[str] = Field(default_factory=list)
    active_time_intervals: list[str] = Field(default_factory=list)
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    send_resolved: bool | None = None
    continue_: bool = Field(default=False, alias="continue")
    routes: list[RouteConfig] = Field(default_factory=list)

    _re = field_validator("match_re")(_check_regexes)
    _matchers = field_validator("matchers")(_parse_matcher_list)
    _intervals: Periods = PrivateAttr(default_factory=dict)
    _interval_configs: list[TimeIntervalConfig] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _one_receiver_key(self) -> RouteConfig:
        if self.receiver is not None and self.receivers is not None:
            raise ValueError("give receiver (Alertmanager's) or receivers (a list), not both")
        return self

    def use_time_intervals(self, intervals: Periods, configs: Sequence[TimeIntervalConfig] = ()) -> None:
        """The top-level `time_intervals` the tree's `mute_time_intervals` / `active_time_intervals` name
        (`configs`: as the rules files gave them, for display)."""
        self._intervals = dict(intervals)
        self._interval_configs = list(configs)

    def time_interval_configs(self) -> list[TimeIntervalConfig]:
        """The top-level `time_intervals` as given (see `use_time_intervals`)."""
        return list(self._interval_configs)

    def interval_refs(self, loc: tuple[str | int, ...] = ("route",)) -> list[tuple[tuple[str | int, ...], str]]:
        """Every (place, name) where the tree names a time interval, for the config's reference check."""
        out = [
            ((*loc, key, i), name)
            for key in ("mute_time_intervals", "active_time_intervals")
            for i, name in enumerate(getattr(self, key))
        ]
        for k, child in enumerate(self.routes):
            out += child.interval_refs((*loc, "routes", k))
        return out

    def all_matchers(self) -> tuple[Matcher, ...]:
        """`match`, `match_re` and `matchers` together."""
        return equality_matchers(self.match, self.match_re) + _matchers(self.matchers)

    def receiver_list(self) -> list[str] | None:
        """`receiver` (Alertmanager's, one) or `receivers` (alertd's list); None when neither is set."""
        return [self.receiver] if self.receiver is not None else self.receivers

    def to_route(self, parent: Route | None = None, key: str = "{}", intervals: Periods | None = None) -> Route:
        """The resolved `Route` tree: every unset value taken from `parent` (or the defaults at the root).

        Time intervals are not inherited (as in Alertmanager); a name with no interval mutes nothing
        (the config check reports it)."""
        base = parent if parent is not None else Route()
        known = self._intervals if intervals is None else intervals
        receivers = self.receiver_list()
        node = Route(
            matchers=self.all_matchers(),
            receivers=tuple(receivers) if receivers is not None else base.receivers,
            group_by=tuple(self.group_by) if self.group_by is not None else base.group_by,
            group_wait=_pick(self.group_wait, base.group_wait),
            group_interval=_pick(self.group_interval, base.group_interval),
            repeat_interval=_pick(self.repeat_interval, base.repeat_interval),
            send_resolved=_pick(self.send_resolved, base.send_resolved),
            continue_=self.continue_ if parent is not None else False,
            key=key,
            mute_time_intervals=tuple((n, known.get(n, ())) for n in self.mute_time_intervals),
            active_time_intervals=tuple((n, known.get(n, ())) for n in self.active_time_intervals),
        )
        children = [
            child.to_route(node, child_key(key, i, child.all_matchers()), known) for i, child in enumerate(self.routes)
        ]
        return node.with_children(children)


class InhibitRuleConfig(Strict):
    """While an alert matching `source_match` fires, alerts matching `target_match` with the same
    `equal` labels are muted.

    `source_match_re` / `target_match_re` add anchored regular-expression matchers to either side, and
    `source_matchers` / `target_matchers` Alertmanager's matcher strings (`['alertname="loss_nan"']`).
    """

    source_match: dict[str, str] = Field(default_factory=dict)
    target_match: dict[str, str] = Field(default_factory=dict)
    source_match_re: dict[str, str] = Field(default_factory=dict)
    target_match_re: dict[str, str] = Field(default_factory=dict)
    source_matchers: list[str] = Field(default_factory=list)
    target_matchers: list[str] = Field(default_factory=list)
    equal: list[str] = Field(default_factory=list)

    _re = field_validator("source_match_re", "target_match_re")(_check_regexes)
    _matchers = field_validator("source_matchers", "target_matchers")(_parse_matcher_list)

    def to_rule(self) -> InhibitRule:
        """The core `InhibitRule`."""
        return InhibitRule(
            source=equality_matchers(self.source_match, self.source_match_re) + _matchers(self.source_matchers),
            target=equality_matchers(self.target_match, self.target_match_re) + _matchers(self.target_matchers),
            equal=tuple(self.equal),
        )


Place = Callable[[str, tuple[str | int, ...], str], _P]


def check_time_intervals(parsed: Sequence[tuple[Any, Any]], root: RouteConfig, place: Place[_P]) -> list[_P]:
    """Collect every file's `time_intervals`, give them to the route tree, and report (through `place`,
    which makes a problem from a file, a location and a message) duplicate names, names the routes use
    that no file defines, and time intervals on the root route (Alertmanager refuses those too)."""
    problems: list[_P] = []
    known: Periods = {}
    for doc, model in parsed:
        for i, interval in enumerate(model.time_intervals):
            if interval.name in known:
                problems.append(
                    place(doc.file, ("time_intervals", i, "name"), f"time interval {interval.name!r} is defined twice")
                )
            known[interval.name] = tuple(p.to_period() for p in interval.time_intervals)
    root.use_time_intervals(known, [i for _, model in parsed for i in model.time_intervals])
    route_file = next((doc.file for doc, model in parsed if model.route is not None), None)
    if route_file is None:
        return problems
    for key in ("mute_time_intervals", "active_time_intervals"):
        if getattr(root, key):
            problems.append(
                place(route_file, ("route", key), f"the root route can't have {key}: give them to a child route")
            )
    defined = ", ".join(sorted(known)) or "none"
    for loc, name in root.interval_refs():
        if name not in known:
            problems.append(place(route_file, loc, f"no time interval named {name!r} (defined: {defined})"))
    return problems
