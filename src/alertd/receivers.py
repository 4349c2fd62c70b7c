"""The receivers of the rules file's `notifiers:`: the notifiers that tell (`alertd.notify`) and the actions
that act on a run (`alertd.actions`), as one configuration type and one factory. The one place that knows
both (they never import each other): the config loader and the service build receivers through it.
Modules are imported only when their type is used."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from alertd.actions.config import ACTION_TYPES, ActionConfig, action_receivers
from alertd.notify.base import Notifier
from alertd.notify.config import Reporting, TellConfig
from alertd.notify.config import takes_reports as _tell_takes_reports

__all__ = [
    "ACTION_TYPES",
    "NOTIFIERS",
    "NotifierConfig",
    "accepts",
    "action_receivers",
    "build_notifier",
    "takes_reports",
]

NotifierConfig = TellConfig | ActionConfig
"""Any `notifiers:` entry, told apart by its `type`."""

NOTIFIERS: dict[str, str] = {
    "log": "alertd.notify.log:LogNotifier",
    "webhook": "alertd.notify.webhook:WebhookNotifier",
    "email": "alertd.notify.email:EmailNotifier",
    "alertmanager": "alertd.notify.alertmanager:AlertmanagerNotifier",
    "exec": "alertd.notify.exec:ExecNotifier",
    "apprise": "alertd.notify.apprise_notifier:AppriseNotifier",
    "kill": "alertd.actions.kill:KillNotifier",
    "stop_file": "alertd.actions.stop_file:StopFileNotifier",
    "wandb_stop": "alertd.actions.wandb_stop:WandbStopNotifier",
    "slurm": "alertd.actions.slurm:SlurmNotifier",
    "lr_scale": "alertd.actions.inprocess:InProcessNotifier",
    "skip_step": "alertd.actions.inprocess:InProcessNotifier",
    "save": "alertd.actions.inprocess:InProcessNotifier",
    "recover": "alertd.actions.recover:RecoverNotifier",
    "stacks": "alertd.actions.stacks:StacksNotifier",
}


def takes_reports(cfg: NotifierConfig) -> bool:
    """Whether a receiver gets the actions' reports: the actions never do; a notifier that tells by its
    `reports:` (default: all but the pagers)."""
    return isinstance(cfg, Reporting) and _tell_takes_reports(cfg)


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
