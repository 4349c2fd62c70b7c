"""The rules-file models of the actions: the notifiers that act on a training run (`kill`, `stop_file`,
`wandb_stop`, `slurm`, the in-process `lr_scale`, `skip_step`, `save`, and `recover`) rather than tell people."""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from alertd.runs.recovery import RecoverPolicy
from alertd.schema.secretfiles import secrets_from_files
from alertd.schema.types import Duration, Strict
from alertd.userregex import compile_user_regex


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
        _checked_path(self.stop_file, self.base_dir, "stop_file: ")
        if self.wait < 0:
            raise ValueError("ask_first.wait must not be negative")
        return self

    def stop_file_config(self) -> StopFileConfig:
        """The same path as a `stop_file` notifier config (validated: stray braces, relative paths)."""
        return StopFileConfig(type="stop_file", path=self.stop_file, base_dir=self.base_dir)


def _checked_path(path: str, base_dir: str | None, prefix: str = "") -> StopFileConfig:
    """`path` and `base_dir` as a `stop_file` notifier config; ValueError saying what is wrong (after `prefix`)."""
    try:
        return StopFileConfig(type="stop_file", path=path, base_dir=base_dir)
    except ValidationError as e:
        why = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
        raise ValueError(f"{prefix}{why}") from None


class KillConfig(Strict):
    """Stops the training process: optionally asks first (a stop file), then SIGINT (checkpoint), escalating.

    `target` says how the process is found: `writer` (the process alertd verified as holding an event file
    of the alert's `source` and `run` open, see `alertd.runs.writers`; a pid in a file name or label is never
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


JobFrom = Literal["label", "writer"]
_JOB_FROM: tuple[JobFrom, ...] = ("label", "writer")


class SlurmJobConfig(Strict):
    """What the actions on a Slurm job (`slurm`, `recover` with `target: slurm`) share: how the job is attributed
    (`job_from`: `label`, the alert's `slurm_job_id` from a `slurm` source; `writer`, the `SLURM_JOB_ID` of the
    run's verified writer), the programs that ask the controller (`squeue`, `scancel`) and how long each may take
    (`timeout`)."""

    job_from: list[JobFrom] = Field(default_factory=lambda: list(_JOB_FROM), min_length=1)
    scancel: str = Field(default="scancel", min_length=1)
    squeue: str = Field(default="squeue", min_length=1)
    timeout: Duration = Field(default=30.0, gt=0)


class SlurmNotifierConfig(SlurmJobConfig):
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


class CommandConfig(Strict):
    """What the in-process actions (`lr_scale`, `skip_step`, `save`) share: the run's commands directory and how
    often, how long.

    `path` names the commands directory (alertd's callbacks read `<output_dir>/alertd-commands`), a template with
    `{label}` placeholders expanded and checked exactly as the `stop_file` notifier's `path` (absolute, or relative
    to `base_dir`, never leaving it); the directory must exist. `at_most`: the most commands this notifier writes
    into one run's directory (pending or done: counted from the directory); `wait`: how long to wait for the
    trainer's acknowledgement before reporting without it.
    """

    path: str = Field(min_length=1)
    base_dir: str | None = None
    at_most: int | None = Field(default=None, ge=1)
    wait: Duration = Field(default=60.0, ge=0)

    @model_validator(mode="after")
    def _path(self) -> CommandConfig:
        _checked_path(self.path, self.base_dir)
        return self

    def stop_file_config(self) -> StopFileConfig:
        """The same path as a `stop_file` notifier config (validated: stray braces, relative paths)."""
        return _checked_path(self.path, self.base_dir)


class LrScaleConfig(CommandConfig):
    """Asks the trainer to multiply every param group's LR and its scheduler's base LRs by `factor`, not below
    `min_lr`, at its next step boundary."""

    type: Literal["lr_scale"]
    factor: float = Field(default=0.5, gt=0, allow_inf_nan=False)
    min_lr: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class SkipStepConfig(CommandConfig):
    """Asks the trainer to drop its next update (every gradient set to None before `optimizer.step()`)."""

    type: Literal["skip_step"]


class SaveConfig(CommandConfig):
    """Asks the trainer to save a checkpoint at its next step boundary, if its weights are finite."""

    type: Literal["save"]


_EVENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")


class RecoverConfig(SlurmJobConfig):
    """Rolls the run back and goes on (`alertd.runs.recovery`): on an alert from the run, stop it without a
    poisoned save, choose the newest checkpoint of the ledger with finite weights at least `rollback` steps before
    the incident, write the recovery plan next to it (updates to skip: `skip` after the checkpoint, else through
    the step after the incident's; the LR times `lr_scale`), and start the same run again, `backoff` after it
    ended. At most `max_attempts` recoveries; the next incident, or one whose attempt's output showed an event of
    `give_up_on`, stops the run for good and is reported (the page).

    `target: child` (the default): alertd exec's child. `checkpoints`: the ledger's directory (default: `exec:
    {checkpoints}`, else where the child's callbacks said it is). The stop: the stop file at once, SIGINT `wait`
    later if the child still runs, SIGTERM `grace` after that.

    `target: slurm`: the Slurm job tied to the alert's run (not under alertd exec), attributed exactly as the
    `slurm` notifier's (`job_from`: `label`, the `slurm_job_id` label of an alert from a `slurm` source; `writer`,
    the `SLURM_JOB_ID` of the run's verified writer; both known: they must agree), active as `squeue --json`
    (`squeue`) lists it. `checkpoints` is required: the ledger's directory as a path template with `{label}`
    placeholders (`/runs/{run}/out`), expanded and checked exactly as the `stop_file` notifier's `path`
    (absolute, or relative to `base_dir`, never leaving it). The job is requeued with `scontrol requeue`
    (`scontrol`): Slurm kills its processes (SIGTERM, SIGKILL after its KillWait: alertd's callbacks save nothing
    then); once it is pending again it may start `backoff` (at least 2s) later (`scontrol update
    StartTime=now+N`, where Slurm would hold it two minutes), and its callbacks apply the plan file once. A
    give-up cancels the job (`scancel`). Each command may take `timeout`. `wait`, `grace` and `give_up_on`'s
    output events are alertd exec's: not used.
    """

    type: Literal["recover"]
    target: Literal["child", "slurm"] = "child"
    rollback: int = Field(default=0, ge=0)
    skip: int | None = Field(default=None, ge=0)
    lr_scale: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
    max_attempts: int = Field(default=3, ge=1, le=1000)
    backoff: Duration = Field(default=0.0, ge=0)
    give_up_on: list[str] = Field(default_factory=lambda: ["cuda_oom"])
    near: int | None = Field(default=None, ge=0)
    checkpoints: str | None = Field(default=None, min_length=1)
    base_dir: str | None = None
    wait: Duration = Field(default=10.0, ge=0)
    grace: Duration = Field(default=300.0, ge=0)
    scontrol: str = Field(default="scontrol", min_length=1)

    _SLURM_ONLY: ClassVar[tuple[str, ...]] = ("job_from", "scancel", "squeue", "scontrol", "timeout", "base_dir")
    _CHILD_ONLY: ClassVar[tuple[str, ...]] = ("wait", "grace")

    @model_validator(mode="after")
    def _target_keys(self) -> RecoverConfig:
        given = self.model_fields_set
        if self.target == "child":
            wrong = [k for k in self._SLURM_ONLY if k in given]
            if wrong:
                raise ValueError(f"`{wrong[0]}` is only used with target: slurm (target is child)")
            return self
        wrong = [k for k in self._CHILD_ONLY if k in given]
        if wrong:
            raise ValueError(
                f"`{wrong[0]}` is only used with target: child (with target: slurm, Slurm stops the job: its KillWait)"
            )
        if self.checkpoints is None:
            raise ValueError(
                "target: slurm needs `checkpoints`: the directory of the run's checkpoint ledger, a path template "
                "such as /runs/{run}/out"
            )
        _checked_path(self.checkpoints, self.base_dir, "checkpoints: ")
        return self

    def checkpoints_config(self) -> StopFileConfig:
        """`checkpoints` (target slurm) as a `stop_file` notifier config: its template, expanded the same way."""
        assert self.checkpoints is not None
        return _checked_path(self.checkpoints, self.base_dir)

    @field_validator("give_up_on")
    @classmethod
    def _events(cls, events: list[str]) -> list[str]:
        wrong = [e for e in events if not _EVENT_NAME.fullmatch(e)]
        if wrong:
            raise ValueError(f"{wrong[0][:60]!r} is not an event name (cuda_oom, nccl_timeout, traceback, ...)")
        return events

    def policy(self) -> RecoverPolicy:
        """The pure policy."""
        return RecoverPolicy(
            self.rollback,
            self.skip,
            self.lr_scale,
            self.max_attempts,
            self.backoff,
            frozenset(self.give_up_on),
            self.near,
        )


class StacksConfig(Strict):
    """Captures what each process of the alert's run is doing (every thread's Python stack) and reports it.

    `target` finds the run's processes as `kill`'s does, and proves them the same way: `child` (alertd exec's
    trainer: the default under `alertd exec`) or `writer` (the run's verified writer); then its ranks: under
    `child`, the child's descendants with RANK in their environment (the child itself when it has none), under
    `writer`, the processes of the writer's torchrun job (its parent's children with RANK and the same
    TORCHELASTIC_RUN_ID). Each is asked first through alertd's callbacks' hook (`alertd.integrations.stacks`:
    a signal, then up to `wait` for its stacks file to grow), else with `py_spy` (`py-spy dump`, at most
    `py_spy_timeout`; needs ptrace), else the report says why no stack could be taken. `summary_chars`: the
    notification's size; `max_bytes`: the whole dump kept on the run (split between the processes)."""

    type: Literal["stacks"]
    target: Literal["child", "writer"] = "writer"
    wait: Duration = Field(default=2.0, gt=0, le=30)
    py_spy: str | None = "py-spy"
    py_spy_timeout: Duration = Field(default=10.0, gt=0, le=120)
    summary_chars: int = Field(default=3000, ge=200, le=100_000)
    max_bytes: int = Field(default=256 * 1024, ge=4096, le=16 * 1024 * 1024)
    max_processes: int = Field(default=64, ge=1, le=1024)
    allow_other_users: bool = False


ACTION_TYPES = ("kill", "stop_file", "wandb_stop", "slurm", "lr_scale", "skip_step", "save", "recover", "stacks")
"""Notifier types that act on the training run rather than tell people. Each firing reaches them at once and
alone (`alertd.dispatch.plan`'s immediate receivers); what they did is announced to the alert's other
receivers, never to these."""

ActionConfig = (
    KillConfig
    | StopFileConfig
    | WandbStopConfig
    | SlurmNotifierConfig
    | LrScaleConfig
    | SkipStepConfig
    | SaveConfig
    | RecoverConfig
    | StacksConfig
)
"""The actions' configurations (`notifiers:` entries of types kill, stop_file, wandb_stop, slurm, lr_scale,
skip_step, save, recover and stacks)."""


def action_receivers(notifiers: Mapping[str, object]) -> frozenset[str]:
    """The names of the notifiers that are actions (ACTION_TYPES)."""
    return frozenset(name for name, cfg in notifiers.items() if isinstance(cfg, ActionConfig))
