"""The rules-file models of `route:` and `inhibit_rules:`, and their converters to core objects."""

from __future__ import annotations

from typing import TypeVar

from pydantic import Field, field_validator

from alertd.config_types import Duration, Strict
from alertd.dispatch.matchers import equality_matchers
from alertd.dispatch.routes import InhibitRule, Route, child_key
from alertd.userregex import compile_user_regex


def _check_regexes(value: dict[str, str]) -> dict[str, str]:
    for name, pattern in value.items():
        try:
            compile_user_regex(pattern)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return value


_T = TypeVar("_T")


def _pick(value: _T | None, inherited: _T) -> _T:
    return inherited if value is None else value


class RouteConfig(Strict):
    """A node of the routing tree, as in Alertmanager: matchers, receivers, grouping and child routes.

    Unset values are inherited from the parent; the root's defaults are listed in `alertd.dispatch.routes`.
    `match_re` values are regular expressions anchored at both ends.
    """

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    receivers: list[str] | None = None
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    send_resolved: bool | None = None
    continue_: bool = Field(default=False, alias="continue")
    routes: list[RouteConfig] = Field(default_factory=list)

    _re = field_validator("match_re")(_check_regexes)

    def to_route(self, parent: Route | None = None, key: str = "{}") -> Route:
        """The resolved `Route` tree: every unset value taken from `parent` (or the defaults at the root)."""
        base = parent if parent is not None else Route()
        node = Route(
            matchers=equality_matchers(self.match, self.match_re),
            receivers=tuple(self.receivers) if self.receivers is not None else base.receivers,
            group_by=tuple(self.group_by) if self.group_by is not None else base.group_by,
            group_wait=_pick(self.group_wait, base.group_wait),
            group_interval=_pick(self.group_interval, base.group_interval),
            repeat_interval=_pick(self.repeat_interval, base.repeat_interval),
            send_resolved=_pick(self.send_resolved, base.send_resolved),
            continue_=self.continue_ if parent is not None else False,
            key=key,
        )
        children = [
            child.to_route(node, child_key(key, i, equality_matchers(child.match, child.match_re)))
            for i, child in enumerate(self.routes)
        ]
        return node.with_children(children)


class InhibitRuleConfig(Strict):
    """While an alert matching `source_match` fires, alerts matching `target_match` with the same
    `equal` labels are muted.

    `source_match_re` / `target_match_re` add anchored regular-expression matchers to either side.
    """

    source_match: dict[str, str] = Field(default_factory=dict)
    target_match: dict[str, str] = Field(default_factory=dict)
    source_match_re: dict[str, str] = Field(default_factory=dict)
    target_match_re: dict[str, str] = Field(default_factory=dict)
    equal: list[str] = Field(default_factory=list)

    _re = field_validator("source_match_re", "target_match_re")(_check_regexes)

    def to_rule(self) -> InhibitRule:
        """The core `InhibitRule`."""
        return InhibitRule(
            source=equality_matchers(self.source_match, self.source_match_re),
            target=equality_matchers(self.target_match, self.target_match_re),
            equal=tuple(self.equal),
        )
