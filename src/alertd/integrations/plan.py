"""The recovery plan: what a run restarted by alertd's `recover` action does at its start; framework-free.

alertd writes the plan (`write_plan`) before it restarts a run after an incident, as `alertd-recovery.json` in
the run's *ledger directory* (the directory of `alertd-checkpoints.jsonl`: HF `args.output_dir`, Lightning
`default_root_dir`, AlertdLoop `output_dir`), and gives the new child its path in `$ALERTD_RECOVERY_PLAN` and its
attempt number in `$ALERTD_ATTEMPT`. The plan (`RecoveryPlan`, JSON):

    {"version": 1, "run": "train.py", "attempt": 2, "checkpoint": "/abs/out/checkpoint-30", "checkpoint_step": 30,
     "skip": [31, 41], "lr_factor": 0.5, "incident": {"rule": "loss_not_finite", "step": 40, ...}, "time": ...}

says: resume from `checkpoint` (its step in the ledger is `checkpoint_step`), drop the updates numbered `skip[0]`
to `skip[1]` (inclusive; `[]`: none; update number u is the optimizer update that makes u updates done), and
multiply every LR by `lr_factor` once, after the framework restored the optimizer and scheduler state.

Which plan applies (`current_plan`, at training start): `$ALERTD_RECOVERY_PLAN`'s when its `attempt` equals
`$ALERTD_ATTEMPT` (or that is unset); else `<ledger dir>/alertd-recovery.json` when `alertd-recovery.ack.json`
does not name its attempt (a job requeued by Slurm, without alertd's environment: the plan is applied once). A
plan that is malformed is logged (WARNING, naming the file) and nothing of it applies. The trainer applies it only
if training really resumed at `checkpoint_step`, and acknowledges it either way (`acknowledge`, global rank 0):
`alertd-recovery.ack.json` in the ledger directory (and next to the plan file, when that is elsewhere), e.g.
`{"attempt": 2, "applied": true, "resumed_step": 30, "checkpoint": ..., "old_lr": 0.001, "new_lr": 0.0005,
"lr_factor": 0.5, "skip": [31, 41], "time": ...}` or `{"attempt": 2, "applied": false, "refused": "...", ...}`.

`write_run_info` tells `alertd exec` where its child's ledger is: at training start, when `$ALERTD_RUN_INFO` is
set, the integrations write there (atomically) `{"ledger": <abs dir>, "framework": "hf|lightning|torch", "pid":
..., "time": ...}`. The callbacks and `AlertdLoop` apply the plan (`alertd.integrations.steering`); the checkpoint
to resume from is `alertd.integrations.resume.resume_from()`. Files are read bounded (`commands.read_json`: a
regular file of at most 64 KiB, owned by this user or root) and written atomically (`commands.write_atomic`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alertd.integrations.commands import MAX_BYTES, read_json, write_atomic

log = logging.getLogger("alertd.integrations")

PLAN_NAME = "alertd-recovery.json"
"""The plan's file in the ledger directory (written by alertd)."""
ACK_NAME = "alertd-recovery.ack.json"
"""The trainer's acknowledgement of a plan, in the ledger directory."""
PLAN_ENV = "ALERTD_RECOVERY_PLAN"
"""The absolute path of the plan file (set by `alertd exec` on an attempt started by a recovery)."""
RUN_INFO_ENV = "ALERTD_RUN_INFO"
"""Where the integration writes the run's ledger directory, framework and pid at training start."""
ATTEMPT_ENV = "ALERTD_ATTEMPT"
"""The attempt of the run this child is, 1 at the first start (set by `alertd exec`)."""
VERSION = 1
MAX_PLAN_BYTES = MAX_BYTES
"""The largest plan (or acknowledgement) file read: 64 KiB."""


def _integer(data: Mapping[str, Any], key: str, minimum: int) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{key!r} must be an integer >= {minimum} (got {value!r})")
    return value


def _number(data: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{key!r} must be a finite number (got {value!r})")
    return float(value)


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """One recovery plan (see the module's documentation). `path`: the file it was read from ("" when made here);
    not part of its JSON."""

    version: int
    run: str
    attempt: int
    checkpoint: str
    checkpoint_step: int
    skip: tuple[int, int] | None
    lr_factor: float
    incident: dict[str, Any]
    time: float
    path: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The plan file's body."""
        return {
            "version": self.version,
            "run": self.run,
            "attempt": self.attempt,
            "checkpoint": self.checkpoint,
            "checkpoint_step": self.checkpoint_step,
            "skip": list(self.skip) if self.skip else [],
            "lr_factor": self.lr_factor,
            "incident": dict(self.incident),
            "time": self.time,
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> RecoveryPlan:
        """The plan in a parsed JSON body; ValueError saying what is wrong with a malformed one."""
        if not isinstance(data, Mapping):
            raise ValueError("the plan is not a JSON object")
        version = data.get("version")
        if version != VERSION or isinstance(version, bool):
            raise ValueError(f"unsupported plan version {version!r} (this trainer reads version {VERSION})")
        run = data.get("run", "")
        if not isinstance(run, str):
            raise ValueError(f"'run' must be a string (got {run!r})")
        checkpoint = data.get("checkpoint")
        if not isinstance(checkpoint, str) or not checkpoint:
            raise ValueError(f"'checkpoint' must be a non-empty path (got {checkpoint!r})")
        raw_skip = data.get("skip", [])
        skip: tuple[int, int] | None = None
        if raw_skip is not None and raw_skip != []:
            if (
                not isinstance(raw_skip, list | tuple)
                or len(raw_skip) != 2
                or not all(isinstance(u, int) and not isinstance(u, bool) for u in raw_skip)
                or not 1 <= raw_skip[0] <= raw_skip[1]
            ):
                raise ValueError(
                    f"'skip' must be [] or [first, last] update numbers, 1 <= first <= last (got {raw_skip!r})"
                )
            skip = (raw_skip[0], raw_skip[1])
        lr_factor = _number(data, "lr_factor", 1.0)
        if not lr_factor > 0:
            raise ValueError(f"'lr_factor' must be a positive number (got {lr_factor!r})")
        incident = data.get("incident", {})
        if not isinstance(incident, dict):
            raise ValueError(f"'incident' must be a JSON object (got {incident!r})")
        return cls(
            version=VERSION,
            run=run,
            attempt=_integer(data, "attempt", 1),
            checkpoint=checkpoint,
            checkpoint_step=_integer(data, "checkpoint_step", 0),
            skip=skip,
            lr_factor=lr_factor,
            incident=dict(incident),
            time=_number(data, "time", 0.0),
            path=path,
        )


def write_plan(directory: str | os.PathLike[str], plan: RecoveryPlan) -> str:
    """Write `plan` atomically as `<directory>/alertd-recovery.json` (alertd does, before the restart); its path.
    OSError on failure."""
    path = os.path.join(os.path.abspath(os.fspath(directory)), PLAN_NAME)
    write_atomic(path, plan.to_json())
    return path


def read_plan(path: str) -> RecoveryPlan | None:
    """The plan in `path`; None (and a WARNING naming the file) when it can't be read or is malformed."""
    body = read_json(path, os.geteuid())
    if isinstance(body, str):
        log.warning("alertd: the recovery plan %s is not applied: %s", path, body)
        return None
    try:
        return RecoveryPlan.from_json(body, os.path.abspath(path))
    except ValueError as e:
        log.warning("alertd: the recovery plan %s is malformed, nothing of it is applied: %s", path, e)
        return None


def read_ack(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The acknowledgement in `<directory>/alertd-recovery.ack.json`, or None when there is none (or it can't be
    read)."""
    body = read_json(os.path.join(os.fspath(directory), ACK_NAME))
    return body if isinstance(body, dict) else None


def current_plan(ledger_dir: str | os.PathLike[str] | None) -> RecoveryPlan | None:
    """The plan that applies at this training start (see the module's documentation), or None."""
    env_path = os.environ.get(PLAN_ENV)
    if env_path:
        plan = read_plan(env_path)
        attempt = os.environ.get(ATTEMPT_ENV)
        if plan is not None and attempt and attempt.strip() != str(plan.attempt):
            log.info(
                "alertd: the recovery plan %s is for attempt %d, this is attempt %s", env_path, plan.attempt, attempt
            )
            return None
        return plan
    if ledger_dir is None:
        return None
    path = os.path.join(os.path.abspath(os.fspath(ledger_dir)), PLAN_NAME)
    if not os.path.lexists(path):
        return None
    plan = read_plan(path)
    if plan is None:
        return None
    ack = read_ack(os.path.dirname(path))
    if ack is not None and ack.get("attempt") == plan.attempt:
        return None  # applied (or refused) already
    return plan


def skips(plan: RecoveryPlan | None, update: int) -> bool:
    """Whether `plan` drops update number `update`."""
    return plan is not None and plan.skip is not None and plan.skip[0] <= update <= plan.skip[1]


def acknowledge(directory: str | os.PathLike[str], plan: RecoveryPlan, applied: bool, **fields: Any) -> None:
    """Write `alertd-recovery.ack.json` in `directory` (and next to the plan's file when that is elsewhere),
    atomically: attempt, applied, `fields`, time. A failure is logged."""
    body = {"attempt": plan.attempt, "applied": applied, **fields, "time": round(time.time(), 6)}
    directories = [os.path.abspath(os.fspath(directory))]
    if plan.path and os.path.dirname(plan.path) not in directories:
        directories.append(os.path.dirname(plan.path))
    for where in directories:
        try:
            write_atomic(os.path.join(where, ACK_NAME), body)
        except (OSError, ValueError) as e:
            log.warning("alertd: can't write the recovery acknowledgement in %s: %s", where, e)


def write_run_info(ledger_dir: str | os.PathLike[str], framework: str) -> None:
    """Write `{"ledger", "framework", "pid", "time"}` to `$ALERTD_RUN_INFO` (atomically) when it is set; a failure
    is logged, never raised."""
    path = os.environ.get(RUN_INFO_ENV)
    if not path:
        return
    body = {
        "ledger": os.path.abspath(os.fspath(ledger_dir)),
        "framework": framework,
        "pid": os.getpid(),
        "time": round(time.time(), 6),
    }
    try:
        write_atomic(path, body)
    except (OSError, ValueError) as e:
        log.warning("alertd: can't write the run's info to %s=%s: %s", RUN_INFO_ENV, path, e)
