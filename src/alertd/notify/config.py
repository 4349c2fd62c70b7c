"""The rules-file models of the notifiers that tell (`notifiers:` entries of types log, webhook, email,
alertmanager, exec and apprise); the actions' are in `alertd.actions.config`."""

from __future__ import annotations

import importlib.util
import re
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, SecretStr, field_validator, model_validator

from alertd.schema.httpauth import BasicAuthConfig, TLSConfig
from alertd.schema.secretfiles import read_secret_file, secrets_from_files
from alertd.schema.types import Duration, Strict
from alertd.templating.notifications import check_notifier_template

NotifierTemplate = Annotated[str, AfterValidator(check_notifier_template)]
"""A notifier's `title`/`text`: a Jinja2 template over the notification (see templating.notifications)."""

PUSHOVER_URL = "https://api.pushover.net/1/messages.json"
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
OPSGENIE_URLS = {"us": "https://api.opsgenie.com", "eu": "https://api.eu.opsgenie.com"}

WebhookFormat = Literal[
    "generic",
    "slack",
    "discord",
    "teams",
    "feishu",
    "dingtalk",
    "wecom",
    "telegram",
    "mattermost",
    "ntfy",
    "pushover",
    "pagerduty",
    "opsgenie",
]


class Reporting(Strict):
    """What every notifier that tells people shares: whether it also gets the action reports.

    `reports`: the reports of the actions (kill, stop_file, wandb_stop, slurm: what was done, or why it was
    refused) go to the alert's receivers that take them. Default: every receiver but the paging ones
    (webhook formats pagerduty, opsgenie and pushover), so that a pager gets one page per incident, not a
    second for the report. An Alertmanager takes them (its routes tell reports by their `action` label).
    """

    reports: bool | None = None


class LogConfig(Reporting):
    """One line per notification on stdout."""

    type: Literal["log"]
    title: NotifierTemplate | None = None
    text: NotifierTemplate | None = None


def _paging_service_url(data: Any) -> Any:
    """PagerDuty's and Opsgenie's own API as the default `url` (Opsgenie's per `region`)."""
    if not isinstance(data, dict) or data.get("format") not in ("pagerduty", "opsgenie"):
        return data
    if "url" in data:
        if data["format"] == "opsgenie" and "region" in data:
            raise ValueError("give region or url, not both")
        return data
    if data["format"] == "pagerduty":
        return {**data, "url": PAGERDUTY_URL}
    region = data.get("region", "us")
    return {**data, "url": OPSGENIE_URLS[region]} if region in OPSGENIE_URLS else data


class WebhookConfig(Reporting):
    """POSTs each notification to `url` in the chat service's own format.

    `url`, `secret` and the `headers` values are secrets: never logged, never in an error message. `url`
    and `secret` may be read from a file instead: `url_file: /run/secrets/hook-url` (Kubernetes Secrets).
    `secret` signs Feishu and DingTalk requests; `chat_id` is Telegram's target chat; `max_alerts` caps the
    alerts per message (0: all); `external_url` is alertd's own address for links (Alertmanager's
    `externalURL`/`generatorURL`); `msgtype` picks DingTalk's and WeCom's message type. `token` (ntfy's access
    token, Pushover's application token) and `user` (Pushover's user key) are secrets too, also as `*_file`.
    """

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("url", "secret", "token", "user", "routing_key", "api_key")

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        data = secrets_from_files(data, cls.SECRET_FIELDS)
        if isinstance(data, dict) and data.get("format") == "pushover" and "url" not in data:
            data = {**data, "url": PUSHOVER_URL}  # Pushover has one API address
        return _paging_service_url(data)

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
    title: NotifierTemplate | None = None
    """The message's title (a template over the notification); alertd's own when absent."""
    text: NotifierTemplate | None = None
    """The message's body (a template over the notification); one line per alert when absent."""
    token: SecretStr | None = None
    """ntfy's access token (`Authorization: Bearer`), Pushover's application API token."""
    user: SecretStr | None = None
    """Pushover's user or group key."""
    retry: Duration = 60.0
    """Pushover's emergency priority (critical alerts): how often it repeats until acknowledged (>= 30s)."""
    expire: Duration = 3600.0
    """Pushover's emergency priority: how long it keeps repeating (<= 3h)."""
    routing_key: SecretStr | None = None
    """PagerDuty's integration key (Events API v2), for format pagerduty; or `routing_key_file`."""
    api_key: SecretStr | None = None
    """Opsgenie's API integration key, for format opsgenie; or `api_key_file`."""
    region: Literal["us", "eu"] | None = None
    """Opsgenie's API region where no `url` is given: us (api.opsgenie.com) or eu (api.eu.opsgenie.com)."""

    @model_validator(mode="after")
    def _check_format_options(self) -> WebhookConfig:
        url = self.url.get_secret_value()
        if not url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.timeout <= 0:
            raise ValueError("timeout must be more than 0s")
        for key, formats in _ONLY_FOR.items():
            if self._given(key) and self.format not in formats:
                verb = "are" if " and " in key else "is"
                raise ValueError(f"{key} {verb} only used by {_formats_text(formats)}, not {self.format}")
        for fmt, keys in _NEEDED.items():
            missing = [k for k in keys if not self._given(k)]
            if self.format == fmt and missing:
                raise ValueError(f"format {fmt} needs {_NEEDS_TEXT.get(fmt, missing[0])}")
        if self.format == "ntfy" and not urlsplit(url).path.strip("/"):
            raise ValueError("format ntfy needs the topic in the url (https://ntfy.sh/<topic>)")
        if self.retry < 30:
            raise ValueError("retry must be at least 30s (Pushover's minimum)")
        if not 0 < self.expire <= 10800:
            raise ValueError("expire must be more than 0s and at most 3h (Pushover's maximum)")
        if self.format == "generic" and (self.title is not None or self.text is not None):
            raise ValueError("title and text are not used by format generic (it sends Alertmanager's JSON)")
        return self

    def _given(self, key: str) -> bool:
        """Whether option `key` is used: set to something (msgtype: not its default; retry and expire: given)."""
        if key == "msgtype":
            return self.msgtype != "markdown"
        if key == "retry and expire":
            return "retry" in self.model_fields_set or "expire" in self.model_fields_set
        value = getattr(self, key)
        return bool(value) if key == "chat_id" else value is not None


_ONLY_FOR: dict[str, tuple[str, ...]] = {
    "secret": ("feishu", "dingtalk"),
    "msgtype": ("dingtalk", "wecom"),
    "token": ("ntfy", "pushover"),
    "user": ("pushover",),
    "retry and expire": ("pushover",),
    "routing_key": ("pagerduty",),
    "api_key": ("opsgenie",),
    "region": ("opsgenie",),
}
"""Options that only some webhook formats use, checked in this order."""
_NEEDED: dict[str, tuple[str, ...]] = {
    "telegram": ("chat_id",),
    "pushover": ("token", "user"),
    "pagerduty": ("routing_key",),
    "opsgenie": ("api_key",),
}
"""What each format needs."""
_NEEDS_TEXT = {
    "pushover": "token (the application's API token) and user (the user key)",
    "pagerduty": "routing_key (or routing_key_file)",
    "opsgenie": "api_key (or api_key_file)",
}


def _formats_text(formats: tuple[str, ...]) -> str:
    return f"format {formats[0]}" if len(formats) == 1 else f"formats {' and '.join(formats)}"


class EmailConfig(Reporting):
    """Sends e-mail through an SMTP server. `password` may be given as `password_file`."""

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("password",)

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)

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
    title: NotifierTemplate | None = None
    """The Subject (a template over the notification); alertd's own when absent."""
    text: NotifierTemplate | None = None
    """The body (a template over the notification); alertd's own alert lines and labels when absent."""


class AlertmanagerConfig(Reporting):
    """Posts alerts to Prometheus Alertmanagers' /api/v2/alerts and re-sends firing ones.

    `url` (one Alertmanager) or `urls` (every peer of an HA cluster, as Prometheus' `static_configs`):
    each alert goes to every peer, and a post counts as delivered when one peer took it. `path_prefix`:
    an Alertmanager served under a path (`/alertmanager`: the API is `/alertmanager/api/v2/alerts`).
    `basic_auth: {username, password | password_file}` or `bearer_token | bearer_token_file` (secrets:
    never logged), and `tls: {ca_file, cert_file, key_file, insecure_skip_verify}`.
    """

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)
    MAX_PEERS: ClassVar[int] = 32

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, ("bearer_token",))

    type: Literal["alertmanager"]
    url: str | None = None
    """One Alertmanager."""
    urls: list[str] | None = Field(default=None, min_length=1)
    """Every Alertmanager peer of an HA cluster."""
    path_prefix: str = ""
    basic_auth: BasicAuthConfig | None = None
    bearer_token: SecretStr | None = None
    tls: TLSConfig | None = None
    resend_interval: Duration = 60.0
    timeout: Duration = 10.0
    generator_url: str | None = None
    """Sent as each alert's `generatorURL` (a link back to this alertd), if set."""

    @property
    def peers(self) -> list[str]:
        """`urls`, or `[url]`."""
        return list(self.urls) if self.urls is not None else [self.url] if self.url is not None else []

    @field_validator("path_prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        if prefix and not re.fullmatch(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+/?", prefix):
            raise ValueError("path_prefix must be a path such as /alertmanager (no query, no '..')")
        if any(part in (".", "..") for part in prefix.split("/")):
            raise ValueError("path_prefix must not hold '.' or '..' parts")
        return prefix.rstrip("/")

    @model_validator(mode="after")
    def _check(self) -> AlertmanagerConfig:
        if self.url is not None and self.urls is not None:
            raise ValueError("give url (one Alertmanager) or urls (every peer of the cluster), not both")
        if self.url is None and self.urls is None:
            raise ValueError("give url (one Alertmanager) or urls (every peer of the cluster)")
        if len(self.peers) > self.MAX_PEERS:
            raise ValueError(f"urls: at most {self.MAX_PEERS} peers")
        seen: set[tuple[str, str, int | None, str]] = set()
        userinfo = False
        for i, url in enumerate(self.peers):
            where = "url" if self.urls is None else f"urls[{i}]"
            parts = urlsplit(url)
            try:
                port = parts.port
            except ValueError:
                raise ValueError(f"{where}: the port is not a number from 1 to 65535") from None
            if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
                raise ValueError(f"{where} must be http(s)://host[:port][/prefix]")
            if parts.query or parts.fragment:
                raise ValueError(f"{where} must not have a query or a fragment (alertd adds /api/v2/alerts)")
            if parts.path.strip("/") and self.path_prefix:
                raise ValueError(f"{where} has a path and path_prefix is set: give the prefix in one place")
            userinfo = userinfo or bool(parts.username or parts.password)
            key = (parts.scheme, parts.hostname.lower(), port, parts.path.rstrip("/"))
            if key in seen:
                raise ValueError(f"{where}: the same Alertmanager is listed twice")
            seen.add(key)
        given = [k for k in ("basic_auth", "bearer_token") if getattr(self, k) is not None]
        if userinfo:
            given.append("credentials in a url")
        if len(given) > 1:
            raise ValueError(f"give one way to authenticate, not {' and '.join(given)}")
        if self.tls is not None and not any(u.startswith("https://") for u in self.peers):
            raise ValueError("tls is set but no url is https://")
        if self.timeout <= 0:
            raise ValueError("timeout must be more than 0s")
        if self.resend_interval <= 0:
            raise ValueError("resend_interval must be more than 0s")
        return self


class ExecConfig(Reporting):
    """Runs a program for each notification: `command` is an argv list (never a shell), its first item an
    absolute path. The generic webhook's JSON goes to stdin, the common fields to `ALERTD_*` variables.

    `timeout`: then the program's process group gets SIGTERM, and SIGKILL `grace` later. Exit 0 is
    delivered; a code in `retry_codes` (default 75, EX_TEMPFAIL) or a timeout is retried; anything else
    fails for good. `env` values are secrets: never logged, replaced by `…` in the program's output.
    """

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)

    type: Literal["exec"]
    command: list[str] = Field(min_length=1)
    timeout: Duration = 30.0
    grace: Duration = 5.0
    env: dict[str, SecretStr] = Field(default_factory=dict)
    retry_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(default_factory=lambda: [75])

    _ENV_NAME: ClassVar[re.Pattern[str]] = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

    @field_validator("command")
    @classmethod
    def _argv(cls, argv: list[str]) -> list[str]:
        if any("\0" in arg for arg in argv):
            raise ValueError("command must not contain NUL characters")
        if not argv[0].startswith("/"):
            raise ValueError(
                f"command[0] must be an absolute path (got {argv[0]!r}): no shell and no PATH lookup are used"
            )
        return argv

    @field_validator("timeout", "grace")
    @classmethod
    def _positive(cls, seconds: float) -> float:
        if seconds <= 0:
            raise ValueError("must be more than 0s")
        return seconds

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name, value in env.items():
            if not cls._ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid variable name")
            if name.upper().startswith("ALERTD_"):
                raise ValueError(f"{name!r}: ALERTD_* variables are set by alertd")
            if "\0" in value.get_secret_value():
                raise ValueError(f"the value of {name!r} must not contain NUL characters")
        return env


class AppriseConfig(Reporting):
    """Delivers through Apprise (the optional extra `alertd[apprise]`) to every URL in `urls`
    (`json://host/path`, `tgram://...`, `discord://...`: Apprise's own URL schemes). The URLs carry tokens:
    they are secrets, never logged and never in an error message; or `urls_file`, one URL a line."""

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)

    type: Literal["apprise"]
    urls: list[SecretStr] = Field(min_length=1, max_length=100)
    timeout: Duration = 30.0
    title: NotifierTemplate | None = None
    """The message's title (a template over the notification); alertd's own when absent."""
    text: NotifierTemplate | None = None
    """The message's body (a template over the notification); one line per alert when absent."""

    @model_validator(mode="before")
    @classmethod
    def _urls_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "urls_file" not in data:
            return data
        if "urls" in data:
            raise ValueError("give urls or urls_file, not both")
        rest = {k: v for k, v in data.items() if k != "urls_file"}
        urls = read_secret_file(data["urls_file"], "urls_file").splitlines()
        return {**rest, "urls": [u.strip() for u in urls if u.strip() and not u.strip().startswith("#")]}

    @model_validator(mode="after")
    def _installed(self) -> AppriseConfig:
        if self.timeout <= 0:
            raise ValueError("timeout must be more than 0s")
        try:
            found = importlib.util.find_spec("apprise") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError("the apprise notifier needs the apprise package: pip install 'alertd[apprise]'")
        return self


PAGING_FORMATS = ("pagerduty", "opsgenie", "pushover")
"""Webhook formats that page a person: they get no action reports unless `reports: true`."""

TellConfig = LogConfig | WebhookConfig | EmailConfig | AlertmanagerConfig | ExecConfig | AppriseConfig
"""The notifiers that tell people (or their systems); the actions' configurations are `alertd.actions.config`'s."""


def takes_reports(cfg: Reporting) -> bool:
    """Whether a notifier that tells gets the action reports (see `Reporting`)."""
    if cfg.reports is not None:
        return cfg.reports
    return not (isinstance(cfg, WebhookConfig) and cfg.format in PAGING_FORMATS)
