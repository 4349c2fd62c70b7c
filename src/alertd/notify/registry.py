"""Which class serves which notifier type. Modules are imported only when their type is used."""

from __future__ import annotations

import importlib
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
}


def build_notifier(name: str, cfg: NotifierConfig, **kwargs: Any) -> Notifier:
    """The notifier object for one `notifiers:` entry."""
    module, _, cls = NOTIFIERS[cfg.type].partition(":")
    factory = getattr(importlib.import_module(module), cls)
    notifier: Notifier = factory(name, cfg, **kwargs)
    return notifier
