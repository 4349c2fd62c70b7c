"""Which notifier classes take the service's `report=` callback: every action reports what it did, no telling
notifier does."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from alertd.actions.base import Action
from alertd.actions.config import ACTION_TYPES
from alertd.receivers import NotifierConfig, accepts, build_notifier

pytestmark = pytest.mark.anyio


def test_every_action_takes_a_report_and_telling_notifiers_and_unknown_types_do_not() -> None:
    assert {"kill", "wandb_stop", "stop_file", "slurm", "lr_scale", "skip_step", "save"} <= set(ACTION_TYPES)
    for action in ACTION_TYPES:
        assert accepts(action, "report"), action
    assert not accepts("webhook", "report") and not accepts("email", "report")
    assert not accepts("no_such_type", "report")


async def test_every_action_type_builds_an_action_of_the_one_contract(tmp_path: Path) -> None:
    """Each action notifier keeps the `Action` contract (send, aclose, its reports in `history`), and each
    telling notifier does not claim it."""
    configs = {
        "kill": {"type": "kill"},
        "stop_file": {"type": "stop_file", "path": str(tmp_path / "{run}" / "STOP")},
        "wandb_stop": {"type": "wandb_stop", "api_key": "k" * 40},
        "slurm": {"type": "slurm"},
        "lr_scale": {"type": "lr_scale", "path": str(tmp_path / "{run}"), "factor": 0.5, "at_most": 3},
        "skip_step": {"type": "skip_step", "base_dir": str(tmp_path), "path": "{run}/alertd-commands"},
        "save": {"type": "save", "path": str(tmp_path / "{run}" / "alertd-commands"), "wait": "5m"},
        "recover": {"type": "recover"},
        "stacks": {"type": "stacks", "target": "child", "wait": "1s"},
    }
    assert set(configs) == set(ACTION_TYPES)  # a new action gets a line here
    adapter: TypeAdapter[NotifierConfig] = TypeAdapter(NotifierConfig)
    for name, raw in configs.items():
        notifier = build_notifier(name, adapter.validate_python(raw))
        try:
            assert isinstance(notifier, Action), name
            assert list(notifier.history) == []
        finally:
            await notifier.aclose()
    webhook = build_notifier("hook", adapter.validate_python({"type": "webhook", "url": "http://127.0.0.1:9/"}))
    assert not isinstance(webhook, Action)
    await webhook.aclose()
