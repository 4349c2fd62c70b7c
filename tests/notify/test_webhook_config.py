"""The webhook notifier's rules-file model: format-specific keys checked, secrets never echoed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from alertd.notify.config import WebhookConfig

URL = "https://hooks.example.com/services/very-secret-token-0042"


def load(**kw: Any) -> WebhookConfig:
    return WebhookConfig.model_validate({"type": "webhook", "url": URL, **kw})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"format": "telegram"}, "format telegram needs chat_id"),
        ({"format": "slack", "secret": "s3cr3t-value"}, "secret is only used by formats feishu and dingtalk"),
        ({"format": "slack", "msgtype": "text"}, "msgtype is only used by formats dingtalk and wecom"),
        ({"timeout": "0s"}, "timeout must be more than 0s"),
        ({"url": "ftp://host/very-secret-token-0042"}, "url must start with http:// or https://"),
        ({"format": "teams", "headers": {"X-Key": 5}}, "headers.X-Key"),
    ],
)
def test_bad_options_are_errors_that_do_not_echo_secrets(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load(**kw)
    text = str(info.value)
    assert message in text
    assert "very-secret-token-0042" not in text and "s3cr3t-value" not in text


def test_valid_options() -> None:
    cfg = load(format="dingtalk", secret="SECx", msgtype="text", max_alerts=5, timeout="2s")
    assert cfg.timeout == 2.0 and cfg.msgtype == "text"
    assert "very-secret-token-0042" not in repr(cfg)
