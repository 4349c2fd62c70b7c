"""The rules-file models of each source type (`sources:` entries)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from alertd.config_types import Duration, SourceConfigBase


class TensorBoardConfig(SourceConfigBase):
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
    """Polls a W&B project's runs over the GraphQL API. The key comes from WANDB_API_KEY."""

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


class WandbDirConfig(SourceConfigBase):
    """Reads local `.wandb` run files (offline or live runs) under `path`."""

    type: Literal["wandb_dir"]
    interval: Duration = 5.0
    path: str


class SamplesConfig(SourceConfigBase):
    """Tails a JSON-lines file of samples (`{"metric", "labels", "time", "step", "value"}`)."""

    type: Literal["samples"]
    path: str


SourceConfig = TensorBoardConfig | NvmlConfig | WandbConfig | WandbDirConfig | SamplesConfig
