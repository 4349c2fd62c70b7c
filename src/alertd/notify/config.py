"""The rules-file models of each notifier type (`notifiers:` entries)."""

from __future__ import annotations

import importlib.util
import re
import signal
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from alertd.config_types import Duration, Strict
from alertd.httpauth import BasicAuthConfig, TLSConfig
from alertd.notify.template_data import check_notifier_template
from alertd.secretfiles import read_secret_file, secrets_from_files
from alertd.userregex import compile_user_regex

NotifierTemplate = Annotated[str, AfterValidator(check_notifier_template)]
"""A notifier's `title`/`text`: a Jinja2 template over the notification (see notify.template_data)."""

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
        if self.format == "telegram" and not self.chat_id:
            raise ValueError("format telegram needs chat_id")
        if self.secret is not None and self.format not in ("feishu", "dingtalk"):
            raise ValueError(f"secret is only used by formats feishu and dingtalk, not {self.format}")
        if self.msgtype != "markdown" and self.format not in ("dingtalk", "wecom"):
            raise ValueError(f"msgtype is only used by formats dingtalk and wecom, not {self.format}")
        if self.format == "ntfy" and not urlsplit(url).path.strip("/"):
            raise ValueError("format ntfy needs the topic in the url (https://ntfy.sh/<topic>)")
        if self.token is not None and self.format not in ("ntfy", "pushover"):
            raise ValueError(f"token is only used by formats ntfy and pushover, not {self.format}")
        if self.user is not None and self.format != "pushover":
            raise ValueError(f"user is only used by format pushover, not {self.format}")
        if self.format == "pushover" and (self.token is None or self.user is None):
            raise ValueError("format pushover needs token (the application's API token) and user (the user key)")
        if ("retry" in self.model_fields_set or "expire" in self.model_fields_set) and self.format != "pushover":
            raise ValueError(f"retry and expire are only used by format pushover, not {self.format}")
        if self.retry < 30:
            raise ValueError("retry must be at least 30s (Pushover's minimum)")
        if not 0 < self.expire <= 10800:
            raise ValueError("expire must be more than 0s and at most 3h (Pushover's maximum)")
        for key, fmt in (("routing_key", "pagerduty"), ("api_key", "opsgenie")):
            if self.format == fmt and getattr(self, key) is None:
                raise ValueError(f"format {fmt} needs {key} (or {key}_file)")
            if self.format != fmt and getattr(self, key) is not None:
                raise ValueError(f"{key} is only used by format {fmt}, not {self.format}")
        if self.region is not None and self.format != "opsgenie":
            raise ValueError(f"region is only used by format opsgenie, not {self.format}")
        if self.format == "generic" and (self.title is not None or self.text is not None):
            raise ValueError("title and text are not used by format generic (it sends Alertmanager's JSON)")
        return self


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
    by itself. `signals` are then sent in order, `grace` apart, until the process exits. Reports name the
    program signalled (`python3 train.py`), never its arguments, unless `report_cmdline` is true.
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
    report_cmdline: bool = False

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


class WandbStopConfig(Strict):
    """Stops the alert's W&B run (its `run` label, `entity/project/run_id`) through the GraphQL API, as
    `wandb.Api().run(path).stop()` does. The key comes from `api_key`, `api_key_file`, else WANDB_API_KEY;
    the server from `base_url`, else WANDB_BASE_URL, else https://api.wandb.ai."""

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("api_key",)

    type: Literal["wandb_stop"]
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout: Duration = 30.0

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL (got {url[:80]!r})")
        return url

    @field_validator("timeout")
    @classmethod
    def _positive_timeout(cls, seconds: float) -> float:
        if seconds <= 0:
            raise ValueError("must be more than 0s")
        return seconds


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


JobFrom = Literal["label", "writer"]
_JOB_FROM: tuple[JobFrom, ...] = ("label", "writer")


class SlurmNotifierConfig(Strict):
    """Stops the alert's Slurm job with `scancel`.

    The job id comes from the alert's `slurm_job_id` label (the `slurm` source sets it) and/or from the
    environment (`SLURM_JOB_ID`) of the run's verified writer process on this host (`job_from`); where
    both are known they must agree, and an alert neither attributes is refused. With `signal`, the job's
    processes (the batch script too: `scancel --full`) first get that signal, so a trainer can save a
    checkpoint and exit; `grace` later a job still active is cancelled (`cancel`: true). Without `signal`
    it is cancelled at once.
    """

    type: Literal["slurm"]
    signal: str | None = None
    grace: Duration = Field(default=60.0, ge=0)
    cancel: bool = True
    job_from: list[JobFrom] = Field(default_factory=lambda: list(_JOB_FROM), min_length=1)
    scancel: str = Field(default="scancel", min_length=1)
    squeue: str = Field(default="squeue", min_length=1)
    timeout: Duration = Field(default=30.0, gt=0)
    dry_run: bool = False

    @field_validator("signal")
    @classmethod
    def _signal_name(cls, name: str | None) -> str | None:
        if name is None:
            return None
        full = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
        if full not in signal.Signals.__members__:
            raise ValueError(f"unknown signal {name!r} (use names such as SIGUSR1, SIGTERM)")
        return full

    @model_validator(mode="after")
    def _does_something(self) -> SlurmNotifierConfig:
        if self.signal is None and not self.cancel:
            raise ValueError("with cancel: false, give a `signal` to send (else the notifier does nothing)")
        return self


NotifierConfig = (
    LogConfig
    | WebhookConfig
    | EmailConfig
    | KillConfig
    | StopFileConfig
    | AlertmanagerConfig
    | ExecConfig
    | WandbStopConfig
    | AppriseConfig
    | SlurmNotifierConfig
)

ACTION_TYPES = ("kill", "stop_file", "wandb_stop", "slurm")
"""Notifier types that act on the training run rather than tell people. Each firing reaches them at once and
alone (`alertd.dispatch.plan`'s immediate receivers); what they did is announced to the alert's other
receivers, never to these."""


PAGING_FORMATS = ("pagerduty", "opsgenie", "pushover")
"""Webhook formats that page a person: they get no action reports unless `reports: true`."""


def action_receivers(notifiers: Mapping[str, NotifierConfig]) -> frozenset[str]:
    """The names of the notifiers that are actions (ACTION_TYPES)."""
    return frozenset(name for name, cfg in notifiers.items() if cfg.type in ACTION_TYPES)


def takes_reports(cfg: NotifierConfig) -> bool:
    """Whether a notifier gets the action reports (see `Reporting`); the actions themselves never do."""
    if not isinstance(cfg, Reporting):
        return False
    if cfg.reports is not None:
        return cfg.reports
    return not (isinstance(cfg, WebhookConfig) and cfg.format in PAGING_FORMATS)
