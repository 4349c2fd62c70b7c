"""The rules-file models of `route:` and `inhibit_rules:`."""

from __future__ import annotations

from pydantic import Field

from alertd.config_types import Duration, Strict


class RouteConfig(Strict):
    """A node of the routing tree, as in Alertmanager: matchers, receivers, grouping and child routes."""

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


class InhibitRuleConfig(Strict):
    """While an alert matching `source_match` fires, matching targets with equal `equal` labels are muted."""

    source_match: dict[str, str] = Field(default_factory=dict)
    target_match: dict[str, str] = Field(default_factory=dict)
    equal: list[str] = Field(default_factory=list)
