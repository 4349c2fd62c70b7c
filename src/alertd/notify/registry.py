"""Which class serves which notifier type. Modules are imported only when their type is used."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from alertd.notify.base import Notifier
from alertd.notify.config import NotifierConfig

NOTIFIERS: dict[str, str] = {
    "log": "alertd.notify.log:LogNotifier",
    "webhook": "alertd.notify.webhook:WebhookNotifier",
    "email": "alertd.notify.email:EmailNotifier",
    "kill": "alertd.notify.kill:KillNotifier",
    "stop_file": "alertd.notify.stop_file:StopFileNotifier",
    "alertmanager": "alertd.notify.alertmanager:AlertmanagerNotifier",
    "exec": "alertd.notify.exec:ExecNotifier",
    "wandb_stop": "alertd.notify.wandb_stop:WandbStopNotifier",
    "apprise": "alertd.notify.apprise_notifier:AppriseNotifier",
    "slurm": "alertd.notify.slurm:SlurmNotifier",
}


def _factory(type_: str) -> Any:
    module, _, cls = NOTIFIERS[type_].partition(":")
    return getattr(importlib.import_module(module), cls)


def accepts(type_: str, keyword: str) -> bool:
    """Whether the class of notifier type `type_` takes the keyword argument `keyword` (False for a type
    not registered)."""
    if type_ not in NOTIFIERS:
        return False
    params = inspect.signature(_factory(type_)).parameters.values()
    return any(
        (p.name == keyword and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)) or p.kind is p.VAR_KEYWORD
        for p in params
    )


def build_notifier(name: str, cfg: NotifierConfig, **kwargs: Any) -> Notifier:
    """The notifier object for one `notifiers:` entry."""
    notifier: Notifier = _factory(cfg.type)(name, cfg, **kwargs)
    return notifier
