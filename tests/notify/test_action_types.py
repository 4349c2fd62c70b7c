"""Which notifier classes take the service's `report=` callback (the action notifiers' reports)."""

from __future__ import annotations

from alertd.receivers import accepts


def test_kill_and_wandb_stop_take_a_report_stop_file_and_unknown_types_do_not() -> None:
    assert accepts("kill", "report") and accepts("wandb_stop", "report")
    assert not accepts("stop_file", "report") and not accepts("webhook", "report")
    assert not accepts("no_such_type", "report")
