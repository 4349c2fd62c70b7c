"""Which notifier classes take the service's `report=` callback: every action reports what it did, no telling
notifier does."""

from __future__ import annotations

from alertd.actions.config import ACTION_TYPES
from alertd.receivers import accepts


def test_every_action_takes_a_report_and_telling_notifiers_and_unknown_types_do_not() -> None:
    assert {"kill", "wandb_stop", "stop_file", "slurm"} <= set(ACTION_TYPES)
    for action in ACTION_TYPES:
        assert accepts(action, "report"), action
    assert not accepts("webhook", "report") and not accepts("email", "report")
    assert not accepts("no_such_type", "report")
