"""The rules-file models of each notifier type (`notifiers:` entries)."""

from __future__ import annotations

import re
import signal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from alertd.config_types import Duration, Strict
from alertd.notify.template_data import check_notifier_template
from alertd.secretfiles import secrets_from_files
from alertd.userregex import compile_user_regex

NotifierTemplate = Annotated[str, AfterValidator(check_notifier_template)]
"""A notifier's `title`/`text`: a Jinja2 template over the notification (see notify.template_data)."""

WebhookFormat = Literal["generic", "slack", "discord", "teams", "feishu", "dingtalk", "wecom", "telegram", "mattermost"]


class LogConfig(Strict):
    """One line per notification on stdout."""

    type: Literal["log"]
    title: NotifierTemplate | None = None
    text: NotifierTemplate | None = None


class WebhookConfig(Strict):
    """POSTs each notification to `url` in the chat service's own format.

    `url`, `secret` and the `headers` values are secrets: never logged, never in an error message. `url`
    and `secret` may be read from a file instead: `url_file: /run/secrets/hook-url` (Kubernetes Secrets).
    `secret` signs Feishu and DingTalk requests; `chat_id` is Telegram's target chat; `max_alerts` caps the
    alerts per message (0: all); `external_url` is alertd's own address for links (Alertmanager's
    `externalURL`/`generatorURL`); `msgtype` picks DingTalk's and WeCom's message type.
    """

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("url", "secret")

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)

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
        if self.format == "generic" and (self.title is not None or self.text is not None):
            raise ValueError("title and text are not used by format generic (it sends Alertmanager's JSON)")
        return self


class EmailConfig(Strict):
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


class AskFirstConfig(Strict):
    """The kill notifier's polite first step: create a stop file, then wait for the process to leave.

    `stop_file` is a path template with `{label}` placeholders, expanded and checked exactly as the
    `stop_file` notifier's `path` (absolute, or relative to `base_dir`, never leaving it). alertd's
    training callback polls that file (default `<output_dir>/ALERTD_STOP`), saves a checkpoint and stops.
    """

    stop_file: str = Field(min_length=1)
    base_dir: str | None = None
    wait: Duration = 60.0

    @model_validator(mode="after")
    def _path(self) -> AskFirstConfig:
        try:
            self.stop_file_config()
        except ValidationError as e:
            why = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
            raise ValueError(f"stop_file: {why}") from None
        if self.wait < 0:
            raise ValueError("ask_first.wait must not be negative")
        return self

    def stop_file_config(self) -> StopFileConfig:
        """The same path as a `stop_file` notifier config (validated: stray braces, relative paths)."""
        return StopFileConfig(type="stop_file", path=self.stop_file, base_dir=self.base_dir)


class KillConfig(Strict):
    """Stops the training process: optionally asks first (a stop file), then SIGINT (checkpoint), escalating.

    `target` says how the process is found: `writer` (the process alertd verified as holding an event file
    of the alert's `source` and `run` open, see `alertd.writers`; a pid in a file name or label is never
    trusted), `pid`, `pidfile` (a small regular file holding the pid), `cmdline` (a regular expression
    searched in `/proc/<pid>/cmdline` that must match exactly one process alertd may signal, or every such
    match with `all`) or `child` (the trainer `alertd exec` started: the default under `alertd exec`).
    With `ask_first`, a stop file is created first and the process gets `wait` to exit
    by itself. `signals` are then sent in order, `grace` apart, until the process exits.
    """

    type: Literal["kill"]
    target: Literal["writer", "pid", "pidfile", "cmdline", "child"] = "writer"
    pid: int | None = Field(default=None, ge=2)
    pidfile: str | None = None
    cmdline: str | None = None
    all: bool = False
    signals: list[str] = Field(default_factory=lambda: ["SIGINT", "SIGTERM", "SIGKILL"], min_length=1)
    grace: Duration = 60.0
    dry_run: bool = False
    allow_other_users: bool = False
    ask_first: AskFirstConfig | None = None

    @field_validator("signals")
    @classmethod
    def _signal_names(cls, names: list[str]) -> list[str]:
        out = []
        for name in names:
            full = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
            if full not in signal.Signals.__members__:
                raise ValueError(f"unknown signal {name!r} (use names such as SIGINT, SIGTERM, SIGKILL)")
            out.append(full)
        return out

    @model_validator(mode="after")
    def _target_fields(self) -> KillConfig:
        needs = {"pid": "pid", "pidfile": "pidfile", "cmdline": "cmdline"}
        for field, target in needs.items():
            given = getattr(self, field) is not None
            if self.target == target and not given:
                raise ValueError(f"target: {target} needs `{field}`")
            if given and self.target != target:
                raise ValueError(f"`{field}` is only used with target: {target} (target is {self.target})")
        if self.all and self.target != "cmdline":
            raise ValueError("`all` is only used with target: cmdline")
        if self.cmdline is not None:
            try:
                compile_user_regex(self.cmdline)
            except ValueError as e:
                raise ValueError(f"cmdline is not a valid regular expression: {e}") from None
        return self


class StopFileConfig(Strict):
    """Creates a file that a training loop polls to stop itself after a checkpoint.

    `path` may name alert labels as `{label}` (for example `/runs/{run}/STOP`); `{{` and `}}` are literal
    braces. Nothing else is expanded. The path must be absolute, or relative to `base_dir`; with
    `base_dir`, the expanded path must stay inside it. A path with a `..` part is always refused.
    """

    type: Literal["stop_file"]
    path: str = Field(min_length=1)
    base_dir: str | None = None

    _PART: ClassVar[re.Pattern[str]] = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]|[^{}]+")

    @model_validator(mode="after")
    def _template(self) -> StopFileConfig:
        self.template_parts()
        if self.base_dir is None and not self.path.startswith("/"):
            raise ValueError("path must be absolute unless base_dir is given")
        if self.base_dir is not None and not self.base_dir.startswith("/"):
            raise ValueError("base_dir must be an absolute path")
        return self

    def template_parts(self) -> list[tuple[bool, str]]:
        """`path` split into (is_label, text) parts; ValueError naming the place of a stray brace."""
        parts: list[tuple[bool, str]] = []
        for m in self._PART.finditer(self.path):
            tok = m.group(0)
            if m.group(1) is not None:
                parts.append((True, m.group(1)))
            elif tok in ("{{", "}}"):
                parts.append((False, tok[0]))
            elif tok in ("{", "}"):
                raise ValueError(
                    f"path template {self.path!r}: stray {tok!r} at column {m.start() + 1} "
                    "(write {label} to insert a label, {{ or }} for a literal brace)"
                )
            else:
                parts.append((False, tok))
        return parts


class AlertmanagerConfig(Strict):
    """Posts alerts to a Prometheus Alertmanager's /api/v2/alerts and re-sends firing ones."""

    type: Literal["alertmanager"]
    url: str
    resend_interval: Duration = 60.0
    timeout: Duration = 10.0
    generator_url: str | None = None
    """Sent as each alert's `generatorURL` (a link back to this alertd), if set."""


NotifierConfig = LogConfig | WebhookConfig | EmailConfig | KillConfig | StopFileConfig | AlertmanagerConfig
