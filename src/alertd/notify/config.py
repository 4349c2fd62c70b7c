"""The rules-file models of each notifier type (`notifiers:` entries)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from alertd.config_types import Duration, Strict

WebhookFormat = Literal["generic", "slack", "discord", "teams", "feishu", "dingtalk", "wecom", "telegram", "mattermost"]


class LogConfig(Strict):
    """One line per notification on stdout."""

    type: Literal["log"]


class WebhookConfig(Strict):
    """POSTs each notification to `url` in the chat service's own format."""

    type: Literal["webhook"]
    format: WebhookFormat = "generic"
    url: SecretStr
    secret: SecretStr | None = None
    chat_id: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    timeout: Duration = 10.0
    max_alerts: int = Field(default=0, ge=0)


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
    tls_verify: bool = True
    """Check the server's certificate and host name (STARTTLS and implicit TLS). Turn off only for tests."""
    ca_file: str | None = None
    """A PEM file of CA certificates to trust instead of the system's (private CA, self-signed)."""


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
    generator_url: str | None = None
    """Sent as each alert's `generatorURL` (a link back to this alertd), if set."""


NotifierConfig = LogConfig | WebhookConfig | EmailConfig | KillConfig | StopFileConfig | AlertmanagerConfig
