"""Secrets read from files (`url_file`, `secret_file`, `password_file`), the Kubernetes-Secret way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from notify_helpers import RecordingServer, notification, send, transition
from pydantic import ValidationError

from alertd.clock import FakeClock
from alertd.notify.config import EmailConfig, WebhookConfig
from alertd.notify.webhook import WebhookNotifier
from alertd.schema.secretfiles import MAX_SECRET_FILE

SECRET = "tok-7c1d-SECRET"

RULES = """\
notifiers:
  hook:
    type: webhook
    {hook}
  mail:
    type: email
    host: 127.0.0.1
    from: alertd@example.com
    to: [ml@example.com]
    {mail}
rules:
  - name: loss_nan
    metric: train/loss
    condition: nonfinite
"""


def check(tmp_path: Path, hook: str, mail: str = "") -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(hook=hook, mail=mail))
    return subprocess.run(
        [sys.executable, "-m", "alertd", "check", str(rules)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.anyio
async def test_the_url_comes_from_the_file(tmp_path: Path, server: RecordingServer) -> None:
    secret_file = tmp_path / "hook-url"
    secret_file.write_text(server.url(f"/hook?token={SECRET}") + "\n")  # as `kubectl create secret` leaves it
    cfg = WebhookConfig.model_validate({"type": "webhook", "url_file": str(secret_file)})
    assert cfg.url.get_secret_value() == server.url(f"/hook?token={SECRET}")  # the newline dropped
    assert SECRET not in repr(cfg) and SECRET not in str(cfg.model_dump())
    await send(WebhookNotifier("hook", cfg, clock=FakeClock(0.0)), notification(transition()))
    assert server.last.route == "/hook" and server.last.query == f"token={SECRET}"


def test_check_accepts_secret_files_and_never_prints_them(tmp_path: Path) -> None:
    (tmp_path / "url").write_text(f"http://127.0.0.1:9/hook/{SECRET}\n")
    (tmp_path / "pw").write_text(f"{SECRET}-pw\n")
    done = check(tmp_path, f"url_file: {tmp_path / 'url'}", f"password_file: {tmp_path / 'pw'}\n    username: a")
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout and SECRET not in done.stdout + done.stderr
    mail = EmailConfig.model_validate(
        {"type": "email", "host": "h", "from": "a@b", "to": ["c@d"], "password_file": str(tmp_path / "pw")}
    )
    assert mail.password is not None and mail.password.get_secret_value() == f"{SECRET}-pw"


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        ("url_file: {missing}", "notifiers.hook.webhook: url_file: cannot read {missing}: No such file or directory"),
        ("url_file: {tmp}", "url_file: cannot read {tmp}: Is a directory"),
        ('url: "http://127.0.0.1:9/x"\n    url_file: {url}', "give url or url_file, not both"),
        ("url_file: {big}", f"url_file: {{big}} is larger than {MAX_SECRET_FILE} bytes"),
        ("url_file: {bad}", "url must start with http:// or https://"),
    ],
)
def test_a_bad_secret_file_is_a_check_error_naming_the_key_not_the_content(
    tmp_path: Path, hook: str, expected: str
) -> None:
    paths = {"missing": tmp_path / "nope", "tmp": tmp_path, "url": tmp_path / "url", "big": tmp_path / "big"}
    paths["bad"] = tmp_path / "bad"
    paths["url"].write_text(f"http://127.0.0.1:9/{SECRET}")
    paths["big"].write_text(SECRET * (MAX_SECRET_FILE // len(SECRET) + 1))
    paths["bad"].write_text(f"ftp://{SECRET}")
    done = check(tmp_path, hook.format(**paths))
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert expected.format(**paths) in out
    assert SECRET not in out


def test_both_a_value_and_a_file_is_an_error() -> None:
    with pytest.raises(ValidationError, match="give password or password_file, not both"):
        EmailConfig.model_validate(
            {"type": "email", "host": "h", "from": "a@b", "to": ["c@d"], "password": "x", "password_file": "/p"}
        )
