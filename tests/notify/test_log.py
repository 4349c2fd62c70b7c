"""The log notifier: one physical line per notification on stdout."""

from __future__ import annotations

from dataclasses import replace

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
        "alertd notify receiver=console status=firing level=warning [FIRING:2] loss_not_finite (run=exp1)"
        " | FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
        "train/loss is NaN at step 250 in exp1"
        " | FIRING loss_not_finite: eval/loss = +Inf in run exp1 (2026-05-28T20:27:10Z)"
    )
    assert lines[1].startswith("alertd notify receiver=console status=resolved level=info [RESOLVED] loss_not_finite")
    assert lines[1].endswith(
        " | RESOLVED loss_not_finite: train/loss back to 0.25 at step 250 in run exp1 (2026-05-28T20:27:10Z)"
    )


@pytest.mark.anyio
async def test_line_breaks_in_annotations_stay_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    t = transition(summary="first line\nsecond line\r\nthird\u2028fourth")
    await LogNotifier("console", LogConfig(type="log")).send(notification(t))
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "first line second line third fourth" in out


@pytest.mark.anyio
async def test_the_line_s_level_follows_severity_and_a_resolution_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    notifier = LogNotifier("console", LogConfig(type="log"))
    info = transition("val_loss_plateau", severity="info", value=0.5, summary="val_loss has not improved")
    await notifier.send(notification(info, receiver="console"))
    notes = {"summary": "grad_norm is 1.1 (> 100)", "resolved_summary": "grad_norm back under 100 (1.1)"}
    done = replace(transition("grad_high", TransitionKind.RESOLVED, value=1.1), annotations=tuple(notes.items()))
    await notifier.send(notification(done, receiver="console"))
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("alertd notify receiver=console status=firing level=info [FIRING:1] val_loss_plateau")
    assert second.startswith("alertd notify receiver=console status=resolved level=info [RESOLVED] grad_high")
    assert second.endswith(": grad_norm back under 100 (1.1)")  # the rule's resolved_summary
    assert "(> 100)" not in second  # never the firing words
