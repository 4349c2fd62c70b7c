"""The rules files: reading, validating with places, merging, compiling (`load_config`).

- `rulesfile`: the models of one file (`RulesFile`, `RuleConfig`, `buffer:` ...), built of the sources',
  notifiers', actions' and routes' own models (whose building blocks are `alertd.schema`); `conditions`: the
  `condition:` grammar; `windows`: the aggregates over a window; `hints`: the nearest known word for a message;
- `validate` (one file's problems, with places), `merge` (several files -> one `Config`), `severities`
  (warnings), `load` (`load_config`), `compiled` (`Config`).
"""

from __future__ import annotations

from alertd.config.compiled import DEFAULT_RECEIVER, Config
from alertd.config.conditions import condition_kinds, parse_condition
from alertd.config.load import load_config
from alertd.config.rulesfile import NAME, BufferConfig, DeliveryConfig, ExportConfig, RuleConfig, RulesFile, RunsConfig
from alertd.config.severities import SEVERITIES

__all__ = [
    "DEFAULT_RECEIVER",
    "NAME",
    "SEVERITIES",
    "BufferConfig",
    "Config",
    "DeliveryConfig",
    "ExportConfig",
    "RuleConfig",
    "RulesFile",
    "RunsConfig",
    "condition_kinds",
    "load_config",
    "parse_condition",
]
