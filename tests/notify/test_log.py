"""The log notifier: one physical line per notification on stdout."""

from __future__ import annotations

import pytest
from notify_helpers import notification, transition

from alertd.model import TransitionKind
from alertd.notify.config import LogConfig
from alertd.notify.log import LogNotifier


@pytest.mark.anyio
async def test_one_line_per_notification(capsys: pytest.CaptureFixture[str]) -> None:
    notifier = LogNotifier("console", LogConfig(type="log"))
    a = transition(run="exp1")
    b = transition(run="exp1", metric="eval/loss", value=float("inf"), step=None, summary=None)
    await notifier.send(notification(a, b, receiver="console"))
    await notifier.send(notification(transition(state=TransitionKind.RESOLVED, value=0.25), receiver="console"))
    await notifier.aclose()

    out = capsys.readouterr().out
    lines = out.splitlines()
    assert out.endswith("\n") and len(lines) == 2
    assert lines[0] == (
        "alertd notify receiver=console status=firing [FIRING:2] loss_not_finite (run=exp1)"
        " | FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
        "train/loss is NaN at step 250 in exp1"
        " | FIRING loss_not_finite: eval/loss = +Inf in run exp1 (2026-05-28T20:27:10Z)"
    )
    assert lines[1].startswith("alertd notify receiver=console status=resolved [RESOLVED] loss_not_finite")
    assert "RESOLVED loss_not_finite: train/loss = 0.25 at step 250" in lines[1]


@pytest.mark.anyio
async def test_line_breaks_in_annotations_stay_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    t = transition(summary="first line\nsecond line\r\nthird\u2028fourth")
    await LogNotifier("console", LogConfig(type="log")).send(notification(t))
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "first line second line third fourth" in out
