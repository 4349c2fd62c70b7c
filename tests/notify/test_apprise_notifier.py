"""The apprise notifier: Apprise's `json://` target posting to a real receiver on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from notify_helpers import RecordingServer, notification, transition

from alertd.errors import NotifyError
from alertd.model import TransitionKind
from alertd.notify.apprise_notifier import AppriseNotifier
from alertd.notify.config import AppriseConfig

SECRET = "tok3nS3cr3tVALUE"


def notifier(server: RecordingServer, **kw: object) -> AppriseNotifier:
    url = f"json://127.0.0.1:{server.port}/hook/{SECRET}"
    return AppriseNotifier("chat", AppriseConfig.model_validate({"type": "apprise", "urls": [url], **kw}))


@pytest.mark.anyio
async def test_firing_and_resolved_post_title_message_and_type(server: RecordingServer) -> None:
    n = notifier(server)
    await n.send(notification(transition()))
    await n.send(notification(transition(state=TransitionKind.RESOLVED, value=0.25)))
    assert [r.path for r in server.requests] == [f"/hook/{SECRET}"] * 2
    firing, resolved = (json.loads(r.body) for r in server.requests)
    assert firing["title"] == "[FIRING:1] loss_not_finite (run=exp1)"
    assert firing["message"].startswith("FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1")
    assert firing["type"] == "failure"
    assert resolved["title"].startswith("[RESOLVED] loss_not_finite")
    assert "RESOLVED loss_not_finite: train/loss back to 0.25 at step 250" in resolved["message"]
    assert "is NaN" not in resolved["message"]  # the firing summary is not repeated
    assert resolved["type"] == "success"


@pytest.mark.anyio
async def test_title_and_text_templates(server: RecordingServer) -> None:
    n = notifier(server, title="{{ status }}: {{ alerts | length }}", text="run {{ alerts[0].labels.run }}")
    await n.send(notification(transition()))
    body = json.loads(server.last.body)
    assert (body["title"], body["message"]) == ("firing: 1", "run exp1")


@pytest.mark.anyio
async def test_a_failing_receiver_is_a_retryable_failure_without_the_url(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.default.status = 500
    caplog.set_level(logging.DEBUG)
    with pytest.raises(NotifyError) as info:
        await notifier(server).send(notification(transition()))
    assert info.value.recoverable
    assert "Apprise does not say why" in str(info.value)
    assert len(server.requests) >= 1
    assert SECRET not in str(info.value) and SECRET not in caplog.text


def test_urls_file_and_secrets_stay_hidden(tmp_path: Path) -> None:
    f = tmp_path / "urls"
    f.write_text(f"# chat\njson://127.0.0.1:9/{SECRET}\n\n")
    cfg = AppriseConfig.model_validate({"type": "apprise", "urls_file": str(f)})
    assert [u.get_secret_value() for u in cfg.urls] == [f"json://127.0.0.1:9/{SECRET}"]
    assert SECRET not in repr(cfg) and SECRET not in str(cfg.model_dump())


RULES = f"""
notifiers:
  chat:
    type: apprise
    urls: ["json://127.0.0.1:9/hook/{SECRET}"]
rules:
  - {{name: r, metric: loss, condition: nonfinite}}
"""


def check(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return subprocess.run(
        [sys.executable, "-m", "alertd", "check", str(rules)], capture_output=True, text=True, timeout=120, env=env
    )


def test_check_accepts_it_when_apprise_is_installed(tmp_path: Path) -> None:
    done = check(tmp_path, dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_check_says_how_to_install_apprise_when_it_is_missing(tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['apprise'] = None  # import apprise fails\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(block), os.environ.get("PYTHONPATH")]))}
    probe = subprocess.run([sys.executable, "-c", "import apprise"], capture_output=True, text=True, env=env)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # the block really works
    done = check(tmp_path, env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "notifiers.chat" in out and "pip install 'alertd[apprise]'" in out
    assert SECRET not in out


@pytest.mark.anyio
async def test_a_warning_alert_is_apprises_warning_type(server: RecordingServer) -> None:
    await notifier(server).send(notification(transition(severity="warning")))
    assert json.loads(server.last.body)["type"] == "warning"


@pytest.mark.anyio
async def test_a_receiver_slower_than_timeout_is_a_retryable_failure(server: RecordingServer) -> None:
    server.answer(200, "ok", delay=5.0)
    with pytest.raises(NotifyError) as info:
        await notifier(server, timeout=0.5).send(notification(transition()))
    assert info.value.recoverable and "no answer within 0.5s" in str(info.value)
    assert SECRET not in str(info.value)
