"""The rules-file models of each notifier type (`notifiers:` entries)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, SecretStr, model_validator

from alertd.config_types import Duration, Strict

WebhookFormat = Literal[
    "generic", "slack", "discord", "teams", "feishu", "dingtalk", "wecom", "telegram", "mattermost"
]


class LogConfig(Strict):
    """One line per notification on stdout."""

    type: Literal["log"]


class WebhookConfig(Strict):
    """POSTs each notification to `url` in the chat service's own format.

    `url`, `secret` and the `headers` values are secrets: never logged, never in an error message.
    `secret` signs Feishu and DingTalk requests; `chat_id` is Telegram's target chat; `max_alerts` caps the
    alerts per message (0: all); `external_url` is alertd's own address for links (Alertmanager's
    `externalURL`/`generatorURL`); `msgtype` picks DingTalk's and WeCom's message type.
    """

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)

    type: Literal["webhook"]
    format: WebhookFormat = "generic"
    url: SecretStr
    secret: SecretStr | None = None
    chat_id: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    timeout: Duration = 10.0
    max_alerts: int = Field(default=0, ge=0)
    external_url: str = ""
    msgtype: Literal["markdown", "text"] = "markdown"

    @model_validator(mode="after")
    def _check_format_options(self) -> WebhookConfig:
        url = self.url.get_secret_value()
        if not url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.timeout <= 0:
            raise ValueError("timeout must be more than 0s")
        if self.format == "telegram" and not self.chat_id:
            raise ValueError("format telegram needs chat_id")
        if self.secret is not None and self.format not in ("feishu", "dingtalk"):
            raise ValueError(f"secret is only used by formats feishu and dingtalk, not {self.format}")
        if self.msgtype != "markdown" and self.format not in ("dingtalk", "wecom"):
            raise ValueError(f"msgtype is only used by formats dingtalk and wecom, not {self.format}")
        return self


class EmailConfig(Strict):
    """Sends e-mail through an SMTP server."""

    type: Literal["email"]
    host: str
    port: int = Field(default=587, ge=1, le=65535)
    tls: Literal["starttls", "implicit", "none"] = "starttls"
    username: str | None = None
    password: SecretStr | None = None
    from_: str = Field(alias="from")
    to: list[str] = Field(min_length=1)
    timeout: Duration = 10.0


class KillConfig(Strict):
    """Stops the training process: SIGINT first (checkpoint), then escalates."""

    type: Literal["kill"]
    target: Literal["writer", "pid", "pidfile", "cmdline"] = "writer"
    pid: int | None = None
    pidfile: str | None = None
    cmdline: str | None = None
    all: bool = False
    signals: list[str] = Field(default_factory=lambda: ["SIGINT", "SIGTERM", "SIGKILL"], min_length=1)
    grace: Duration = 60.0
    dry_run: bool = False
    allow_other_users: bool = False


class StopFileConfig(Strict):
    """Creates a file that a training loop polls to stop itself after a checkpoint."""

    type: Literal["stop_file"]
    path: str


class AlertmanagerConfig(Strict):
    """Posts alerts to a Prometheus Alertmanager's /api/v2/alerts and re-sends firing ones."""

    type: Literal["alertmanager"]
    url: str
    resend_interval: Duration = 60.0
    timeout: Duration = 10.0


NotifierConfig = LogConfig | WebhookConfig | EmailConfig | KillConfig | StopFileConfig | AlertmanagerConfig
