"""A state directory written before alertd took Alertmanager's fingerprint: nothing is sent again or lost."""

from __future__ import annotations

from pathlib import Path

from alertd.dispatch.codec import group_to_json
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.plan import LogEntry, group_key
from alertd.model import Alert, AlertState, Transition, legacy_fingerprint

from .helpers import FIRING, RESOLVED, route, tr

T0 = 1_780_000_000.0


def _alert(t: Transition) -> Alert:
    return Alert(t.rule, AlertState.FIRING, t.labels, t.severity, t.value, t.step, t.time, t.time, t.time)


def _old_state(directory: Path) -> tuple[str, Transition]:
    """What the previous alertd committed after sending one firing alert: the open group and the
    notification log, both keyed by its old fingerprint (rule + labels)."""
    root = route({"receivers": ["chat"], "group_by": ["rule"]})
    t = tr("loss_nan", FIRING, T0)
    old_fp = legacy_fingerprint(t.rule, t.labels)
    gkey = group_key(root, (("rule", "loss_nan"),))
    outbox = Outbox(directory)
    try:
        outbox.commit_plan(
            [],
            {(gkey, "chat"): LogEntry(frozenset({old_fp}), frozenset(), T0, 0)},
            groups={gkey: group_to_json(root.key, (("rule", "loss_nan"),), {old_fp: t}, T0 + 60)},
        )
    finally:
        outbox.close()
    return old_fp, t


def test_an_alert_sent_before_the_upgrade_is_not_sent_again(tmp_path: Path) -> None:
    old_fp, t = _old_state(tmp_path)
    assert old_fp != t.fingerprint  # the fingerprint did change
    root = route({"receivers": ["chat"], "group_by": ["rule"]})
    outbox = Outbox(tmp_path)
    try:
        d = Dispatcher(route=root, outbox=outbox, notifiers={})
        alerts = {t.fingerprint: _alert(t)}
        assert d.submit([], alerts, T0 + 61).notifications == ()  # the group's next flush: nothing new
        assert d.submit([], alerts, T0 + 3600).notifications == ()
        repeat = d.submit([], alerts, T0 + 4 * 3600 + 1).notifications  # repeat_interval (4h) still holds
        assert len(repeat) == 1 and repeat[0].alerts[0].fingerprint == t.fingerprint
        resolved = d.submit([tr("loss_nan", RESOLVED, T0 + 5 * 3600)], {}, T0 + 5 * 3600).notifications
        assert [n.status for n in resolved] == ["resolved"]  # and its resolution is not lost
    finally:
        outbox.close()


def test_without_the_migration_the_old_log_would_resend(tmp_path: Path) -> None:
    """The control: the same alert with a log entry under a fingerprint nobody maps is sent as new."""
    root = route({"receivers": ["chat"], "group_by": ["rule"]})
    t = tr("loss_nan", FIRING, T0)
    gkey = group_key(root, (("rule", "loss_nan"),))
    outbox = Outbox(tmp_path)
    try:
        outbox.commit_plan(
            [],
            {(gkey, "chat"): LogEntry(frozenset({"0123456789abcdef"}), frozenset(), T0, 0)},
            groups={gkey: group_to_json(root.key, (("rule", "loss_nan"),), {"0123456789abcdef": t}, T0 + 60)},
        )
        d = Dispatcher(route=root, outbox=outbox, notifiers={})
        assert len(d.submit([], {t.fingerprint: _alert(t)}, T0 + 61).notifications) == 1
    finally:
        outbox.close()
