"""What the rules files compile to: one `Config`, every file merged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from alertd.buffer import BufferLimits
from alertd.config.rulesfile import ExportConfig, RuleConfig
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig
from alertd.errors import Problem
from alertd.receivers import NotifierConfig
from alertd.rules.rule import Rule
from alertd.runs.restart import RestartPolicy
from alertd.sources.config import SourceConfig


@dataclass(frozen=True)
class Config:
    """Every rules file given, merged and compiled."""

    files: tuple[str, ...]
    rules: tuple[Rule, ...]
    sources: tuple[SourceConfig, ...]
    notifiers: Mapping[str, NotifierConfig]
    route: RouteConfig
    inhibit_rules: tuple[InhibitRuleConfig, ...] = ()
    buffer: BufferLimits = field(default_factory=BufferLimits)
    evaluation_interval: float = 1.0
    rule_configs: Mapping[str, RuleConfig] = field(default_factory=dict)
    stall_after: float = 600.0
    max_retry_after: float = 300.0
    max_notifications_per_flush: int = 10
    export: ExportConfig = field(default_factory=ExportConfig)
    restart: RestartPolicy | None = None
    """`exec: {restart: ...}`: when `alertd exec` starts its child again (None: never)."""
    checkpoints: str | None = None
    """`exec: {checkpoints: DIR}`: where `alertd exec` finds the checkpoint ledger a restart resumes from."""
    rule_files: Mapping[str, str] = field(default_factory=dict)
    """The file each rule was read from, by rule name."""
    warnings: tuple[Problem, ...] = ()
    """What is valid but likely a mistake (a severity no route matches): `alertd check` prints them, the
    service logs them."""


DEFAULT_RECEIVER = "console"
