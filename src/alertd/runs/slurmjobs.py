"""Slurm jobs as `squeue --json` describes them, read into plain records. Pure: no process, no clock.

Two shapes of the same document are read, as the Slurm releases write them:
- Slurm 21.08-22.05 (OpenAPI v0.0.37/38): `job_state` a string, times plain epoch integers, `exit_code`
  the raw wait status (`768` = exit 3; `253` = signal 125, what Slurm records for an out-of-memory kill),
  `time_limit` minutes or null.
- Slurm 23.02 and later (v0.0.39+): `job_state` a list of flags (`["FAILED"]`), numbers as
  `{"set": true, "infinite": false, "number": N}`, `exit_code` as `{"status": [...], "return_code": {...},
  "signal": {"id": {...}, "name": ...}}`.

Slurm 22.05's `squeue --json` ignores its filter options (`--jobs`, `--user`, `--states`): it prints every
job the controller holds, so callers filter the records themselves.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "OUT_OF_MEMORY",
        "TIMEOUT",
        "NODE_FAIL",
        "CANCELLED",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
"""Base states of a job that has ended."""
CRASHED = frozenset({"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
"""Ended states that mean the run failed (the run model's `crashed`)."""
STOPPED = frozenset({"CANCELLED", "PREEMPTED"})
"""Ended states where someone (a user, an admin, the scheduler) stopped the job (the run model's `killed`)."""
ACTIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING"})
"""Base states of a job that has not ended (a COMPLETING job's processes may still run)."""
JOB_ID = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10})?")
"""A job id as scancel takes it: `1234`, or an array task `1234_7`."""
_NAME_MAX = 256


class JobsError(ValueError):
    """`squeue --json` printed something that is not a job list."""


@dataclass(frozen=True, slots=True)
class Job:
    """One job. Times are epoch seconds (None where Slurm has none); `exit_code` the return code of a job
    that exited, `signal` the signal that ended it (both None while it runs)."""

    job_id: str
    """`1234`, or `1234_7` for task 7 of array job 1234."""
    name: str
    user: str
    partition: str
    state: str
    """The base state (`RUNNING`, `OUT_OF_MEMORY`, ...), upper case."""
    reason: str
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    time_limit: float | None
    """Seconds; None when unlimited."""
    exit_code: int | None
    signal: int | None
    batch_host: str
    cluster: str

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    @property
    def exit_status(self) -> int | None:
        """As subprocess's returncode: the exit code, or -N for signal N."""
        if self.signal:
            return -self.signal
        return self.exit_code


def parse_jobs(text: bytes | str) -> list[Job]:
    """The jobs of one `squeue --json` document; raise JobsError for anything else."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise JobsError(f"squeue --json printed no JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise JobsError("squeue --json printed no `jobs` list")
    errors = doc.get("errors")
    if isinstance(errors, list) and errors and not doc["jobs"]:
        first = errors[0]
        why = first.get("error") or first.get("description") if isinstance(first, dict) else first
        raise JobsError(f"squeue reported an error: {str(why)[:200]}")
    out: list[Job] = []
    for i, raw in enumerate(doc["jobs"]):
        if not isinstance(raw, dict):
            raise JobsError(f"jobs[{i}] is not an object")
        out.append(parse_job(raw, i))
    return out


def parse_job(raw: dict[str, Any], index: int = 0) -> Job:
    """One job record of either shape (see the module docstring)."""
    base = _number(raw.get("job_id"))
    if base is None or base <= 0:
        raise JobsError(f"jobs[{index}] has no job_id")
    job_id = str(int(base))
    array_job, task = _number(raw.get("array_job_id")), _number(raw.get("array_task_id"))
    if array_job and task is not None and array_job > 0:
        job_id = f"{int(array_job)}_{int(task)}"
    code, sig = _exit(raw.get("exit_code"))
    limit = _number(raw.get("time_limit"))
    return Job(
        job_id=job_id,
        name=_text(raw.get("name")),
        user=_text(raw.get("user_name")) or str(_number(raw.get("user_id")) or ""),
        partition=_text(raw.get("partition")),
        state=_state(raw.get("job_state")),
        reason=_text(raw.get("state_reason")),
        submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")),
        end_time=_time(raw.get("end_time")),
        time_limit=limit * 60.0 if limit is not None and 0 < limit < 0xFFFFFFFE else None,
        exit_code=code,
        signal=sig,
        batch_host=_text(raw.get("batch_host")),
        cluster=_text(raw.get("cluster")),
    )


def _state(value: Any) -> str:
    """The base state: a string (22.05) or the first flag of a list that names a state (23.02+)."""
    names = value if isinstance(value, list) else [value]
    for name in names:
        if isinstance(name, str) and (name.upper() in TERMINAL or name.upper() in ACTIVE):
            return name.upper()
    first = names[0] if names and isinstance(names[0], str) else "UNKNOWN"
    return first.upper()[:64]


def _number(value: Any) -> float | None:
    """A plain number, or 23.02's `{"set", "infinite", "number"}` (None when unset or infinite)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _time(value: Any) -> float | None:
    t = _number(value)
    return t if t is not None and 0 < t < 1e11 else None


def _exit(value: Any) -> tuple[int | None, int | None]:
    """(return code, signal): from a raw wait status (22.05) or the 23.02 object."""
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        sig_obj = value.get("signal")
        sig = _number(sig_obj.get("id") if isinstance(sig_obj, dict) else sig_obj)
        return (int(code) if code is not None else None), (int(sig) if sig else None)
    raw = _number(value)
    if raw is None:
        return None, None
    status = int(raw)
    if status & 0x7F:
        return 0, status & 0x7F
    return (status >> 8) & 0xFF, None


def _text(value: Any) -> str:
    return value[:_NAME_MAX] if isinstance(value, str) else ""
