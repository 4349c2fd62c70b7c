"""The rules files: reading, validating with places, merging, compiling (`load_config`).

- `types`: the building blocks of every rules-file model (`Strict`, `Duration`), `secretfiles` (`<key>_file`
  secrets), `httpauth` (`basic_auth`, `tls`): what the sources', notifiers' and actions' own models use;
- `rulesfile`: the models of one file (`RulesFile`, `RuleConfig`, `buffer:` ...); `conditions`: `condition:`;
  `windows`: the windowed conditions' options; `hints`: the nearest known word for a message;
- `validate` (one file's problems, with places), `merge` (several files -> one `Config`), `severities`
  (warnings), `load` (`load_config`), `compiled` (`Config`).

The names below are imported from here lazily, so that the sources', notifiers' and actions' models can use
`alertd.config.types` while `alertd.config.merge` uses theirs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alertd.config.compiled import DEFAULT_RECEIVER as DEFAULT_RECEIVER
    from alertd.config.compiled import Config as Config
    from alertd.config.conditions import condition_kinds as condition_kinds
    from alertd.config.conditions import parse_condition as parse_condition
    from alertd.config.load import load_config as load_config
    from alertd.config.merge import _merge as _merge
    from alertd.config.rulesfile import NAME as NAME
    from alertd.config.rulesfile import BufferConfig as BufferConfig
    from alertd.config.rulesfile import DeliveryConfig as DeliveryConfig
    from alertd.config.rulesfile import ExportConfig as ExportConfig
    from alertd.config.rulesfile import RuleConfig as RuleConfig
    from alertd.config.rulesfile import RulesFile as RulesFile
    from alertd.config.rulesfile import RunsConfig as RunsConfig
    from alertd.config.severities import SEVERITIES as SEVERITIES
    from alertd.config.types import redacted as redacted
    from alertd.config.validate import _validate as _validate

_HOMES = {
    "Config": "compiled",
    "DEFAULT_RECEIVER": "compiled",
    "condition_kinds": "conditions",
    "parse_condition": "conditions",
    "load_config": "load",
    "_merge": "merge",
    "NAME": "rulesfile",
    "BufferConfig": "rulesfile",
    "DeliveryConfig": "rulesfile",
    "ExportConfig": "rulesfile",
    "RuleConfig": "rulesfile",
    "RulesFile": "rulesfile",
    "RunsConfig": "rulesfile",
    "SEVERITIES": "severities",
    "redacted": "types",
    "_validate": "validate",
}
"""Where each name is defined (`_merge`, `_validate`: the API's dry run validates a posted file as a file is)."""

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
    "redacted",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
