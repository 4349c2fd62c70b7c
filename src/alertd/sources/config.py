"""The rules-file models of each source type (`sources:` entries)."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from alertd.schema.httpauth import BasicAuthConfig, TLSConfig
from alertd.schema.secretfiles import secrets_from_files
from alertd.schema.types import Duration, SourceConfigBase, Strict
from alertd.userregex import compile_user_regex


class FileSourceConfig(SourceConfigBase):
    """Keys of the sources that read local files: how they learn that a file changed.

    `watch: notify` reads a file the moment the kernel reports a write (inotify) and lists a directory
    the moment an entry appears in it, with a full rescan every `rescan` as a safety net; `poll` stats
    every file each `interval` (for NFS, CIFS, FUSE and other mounts where notifications do not arrive);
    `auto` (the default) notifies where the file system delivers notifications and polls elsewhere.
    """

    watch: Literal["auto", "notify", "poll"] = "auto"
    rescan: Duration = Field(default=60.0, gt=0)
    """With notifications, how often every file is looked at anyway (a missed event costs at most this)."""


class TensorBoardConfig(FileSourceConfig):
    """Tails every event file under `logdir`, recursively. A logdir not there yet is waited for."""

    type: Literal["tensorboard"]
    logdir: str


class NvmlConfig(SourceConfigBase):
    """Reads the local GPUs through NVML. No library or driver: disabled with one warning.

    `devices` limits the source to these NVML indices (all GPUs when absent). `retry_init` is how
    often a disabled source tries `nvmlInit` again. `processes` reports per-process GPU memory
    (label `pid`); `mig` reports each MIG device of a GPU in MIG mode.
    """

    type: Literal["nvml"]
    interval: Duration = 2.0
    devices: list[int] | None = None
    retry_init: Duration = Field(default=300.0, gt=0)
    processes: bool = True
    mig: bool = True


class WandbConfig(SourceConfigBase):
    """Polls a W&B project's runs over the GraphQL API. The key comes from WANDB_API_KEY, or `api_key`, or
    `api_key_file` (a Kubernetes Secret volume)."""

    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("api_key",)

    type: Literal["wandb"]
    interval: Duration = 30.0
    project: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    runs: Literal["running", "all"] | list[str] = "running"
    base_url: str | None = None
    api_key: SecretStr | None = None
    page_size: int = Field(default=1000, ge=1, le=10000)
    """History rows asked for per request (a `minStep`..`maxStep` window of this many steps)."""
    system_samples: int = Field(default=100, ge=0, le=10000)
    """System-metric rows asked for per poll (`events(samples:)`); 0 turns system metrics off."""
    max_retries: int = Field(default=4, ge=0, le=20)
    """Retries of one request within a poll on 429, 5xx or a connection error."""
    max_retry_wait: Duration = 60.0
    """Longest wait between two tries; a longer Retry-After ends the poll (recoverable error)."""
    auth_backoff: Duration = 600.0
    """After a 401/403, how long polls fail fast without calling the API (or until config reload)."""
    timeout: Duration = 30.0
    """Timeout of one HTTP request."""

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)


class WandbDirConfig(FileSourceConfig):
    """Reads local `.wandb` run files (offline or live runs) under `path`."""

    type: Literal["wandb_dir"]
    interval: Duration = 5.0
    path: str


class SamplesConfig(FileSourceConfig):
    """Tails a JSON-lines file of samples (`{"metric", "labels", "time", "step", "value"}`)."""

    type: Literal["samples"]
    path: str


class TextPattern(Strict):
    """A user pattern of a text log: a regex whose named groups are values (RE2 syntax, linear time).

    `(?P<loss>\\S+)` yields the metric `loss` (or `metrics[loss]` when renamed); a group named `step`
    is the step. A line that a pattern matches is not parsed by the built-in shapes.
    """

    regex: str
    metrics: dict[str, str] = Field(default_factory=dict)
    """Group name -> metric name, for groups whose metric is not named like the group."""

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        rx = compile_user_regex(value)
        if not rx.groupindex:
            raise ValueError(f"regex {value!r} has no named group: name each value, as in (?P<loss>\\S+)")
        return value

    @model_validator(mode="after")
    def _known_groups(self) -> TextPattern:
        unknown = sorted(set(self.metrics) - set(compile_user_regex(self.regex).groupindex))
        if unknown:
            raise ValueError(f"metrics names group(s) {unknown} that the regex does not have")
        return self


class TextEvent(Strict):
    """A line that matches `regex` is the event `name` (a sample of `log.event{event=NAME}`, value 1).

    A `fatal` event means the run crashed (`run.crashed` = 1).
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    regex: str
    fatal: bool = False

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_user_regex(value)
        return value


class TextLogConfig(FileSourceConfig):
    """Tails plain-text logs (`path`: a file or a glob, `**` too), parsing the shapes trainers print."""

    type: Literal["textlog"]
    path: str = Field(min_length=1)
    builtin: bool = True
    """Parse the built-in shapes (key=value, key: value, dicts and JSON objects, progress-bar postfixes)."""
    patterns: list[TextPattern] = Field(default_factory=list)
    events: list[TextEvent] = Field(default_factory=list)
    builtin_events: bool = True
    """Recognise tracebacks, CUDA out of memory, NCCL timeouts, `Killed` and `nan detected`."""


class CsvConfig(FileSourceConfig):
    """Tails CSV metric files (`path`: a file or a glob), as Lightning's and LitGPT's CSVLogger write them."""

    type: Literal["csv"]
    path: str = Field(min_length=1)
    step_column: str = "step"
    max_columns: int = Field(default=10_000, ge=1)
    """The most metric columns read from one file; a wider header's further columns are not read (said in the
    source's health)."""


class MlflowConfig(FileSourceConfig):
    """Reads MLflow runs: a local file store (`mlruns/`) or a tracking server over its REST API.

    `tracking_uri` defaults to MLFLOW_TRACKING_URI; the token to MLFLOW_TRACKING_TOKEN (or `token`, or
    `token_file`), or basic auth from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD. Neither is
    ever logged.
    """

    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("token",)

    type: Literal["mlflow"]
    interval: Duration = 10.0
    tracking_uri: str | None = None
    experiments: list[str] | None = None
    """Experiment ids or names to watch (all when absent)."""
    runs: Literal["running", "all"] = "running"
    """Runs to read (`running`: those running when first seen, all their history, and each one's end;
    `all`: every run, ended ones too). Both for a tracking server and for a file store."""
    token: SecretStr | None = None
    page_size: int = Field(default=1000, ge=1, le=25000)
    max_retries: int = Field(default=4, ge=0, le=20)
    max_retry_wait: Duration = 60.0
    timeout: Duration = 30.0

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)


class SlurmConfig(SourceConfigBase):
    """Slurm job states from `squeue --json` (Slurm 21.08 and later), as series and run states.

    `users`, `partitions` and `jobs` (job-name globs) choose the jobs (all the controller holds when
    absent). `squeue` is the program (from PATH; SLURM_CONF and the other SLURM_* variables of alertd's
    environment reach it). A run of `squeue` longer than `timeout`, or printing more than `max_output`
    bytes, fails the poll; jobs beyond `max_jobs` are left out (and counted).
    """

    type: Literal["slurm"]
    interval: Duration = 30.0
    users: list[str] | None = None
    partitions: list[str] | None = None
    jobs: list[str] | None = None
    squeue: str = Field(default="squeue", min_length=1)
    timeout: Duration = Field(default=30.0, gt=0)
    max_output: int = Field(default=64 << 20, ge=1024)
    max_jobs: int = Field(default=10_000, ge=1)


_PROM_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PrometheusQuery(Strict):
    """One PromQL expression, run as an instant query each interval; each element of its answer is a sample.

    The metric is `metric`, else the element's `__name__` (an expression such as `rate(x[5m])` or
    `avg by (job) (...)` drops the name: give `metric` then). `labels` are added to every sample of the
    query (over the answer's own labels of the same name): `{run: llama-70b}` ties a job's GPUs to a run.
    An answer of more than `max_series` series fails the query.
    """

    query: str = Field(min_length=1, max_length=64 * 1024)
    metric: str | None = Field(default=None, min_length=1, max_length=256, pattern=r"^\S+$")
    labels: dict[str, str] = Field(default_factory=dict)
    max_series: int = Field(default=10_000, ge=1, le=1_000_000)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _PROM_LABEL.match(name) or name.startswith("__"):
                raise ValueError(f"label name {name!r}: expected letters, digits and _ (not starting with __)")
            if name == "source":
                raise ValueError("label source is the source's name: it cannot be set")
            if not text:
                raise ValueError(f"label {name}: the value is empty")
        return value


class PrometheusTls(TLSConfig):
    """TLS towards the server, as Prometheus' `tls_config`: `TLSConfig`'s keys, and `server_name` (the name the
    certificate must carry and the SNI sent, when the URL's host is not it)."""

    server_name: str | None = Field(default=None, min_length=1)


class PrometheusConfig(SourceConfigBase):
    """Runs PromQL instant queries against a Prometheus server (`GET/POST /api/v1/query`) each interval.

    Auth and TLS as Prometheus' own clients take them: `basic_auth` (`password` or `password_file`), or
    `bearer_token` / `bearer_token_file`; `tls`. Neither secret is ever logged or put in an error.
    """

    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("bearer_token",)

    type: Literal["prometheus"]
    interval: Duration = Field(default=15.0, gt=0)
    url: str
    """The server (`http://prometheus:9090`, or with the path prefix it is served under)."""
    queries: list[PrometheusQuery] = Field(min_length=1, max_length=1000)
    basic_auth: BasicAuthConfig | None = None
    bearer_token: SecretStr | None = None
    tls: PrometheusTls | None = None
    timeout: Duration = Field(default=10.0, gt=0)
    """The longest a query may take, answer read included (also sent to Prometheus as its `timeout`)."""
    max_answer: int = Field(default=16 << 20, ge=1024)
    """The most bytes one query's answer may have (decompressed); a longer one fails the query."""
    max_retries: int = Field(default=2, ge=0, le=20)
    """Retries of one query within a poll on 429, 5xx or a refused connection."""
    max_retry_wait: Duration = 10.0

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, cls.SECRET_FIELDS)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError("not a URL (expected http://host:9090 or https://...)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http://host:port or https://host:port")
        if parts.username is not None or parts.password is not None:
            raise ValueError("no user or password in the URL: use basic_auth (password_file)")
        if parts.query or parts.fragment:
            raise ValueError("no query or fragment: the server's address, with its path prefix if it has one")
        return value

    @model_validator(mode="after")
    def _auth(self) -> PrometheusConfig:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ValueError("give basic_auth or bearer_token, not both")
        if self.tls is not None and urlsplit(self.url).scheme != "https":
            raise ValueError("tls is set but the url is not https://")
        return self


SourceConfig = (
    TensorBoardConfig
    | NvmlConfig
    | WandbConfig
    | WandbDirConfig
    | SamplesConfig
    | TextLogConfig
    | CsvConfig
    | MlflowConfig
    | SlurmConfig
    | PrometheusConfig
)
