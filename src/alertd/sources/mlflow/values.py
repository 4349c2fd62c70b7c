"""MLflow values, times and run statuses as alertd reads them: shared by the file-store and REST readers.

Values, as the real writers spell them (checked against mlflow 3.17):

- File store: a metric line is `f"{timestamp} {value} {step}"` written with Python's `str(float)`, so the
  non-finite values are `nan`, `inf` and `-inf` (ints are written as ints: `3`). Older stores have
  lines without the step (`timestamp value`, step 0); lines logged with a dataset add two fields
  (`timestamp value step dataset_name dataset_digest`).
- REST: the JSON is protobuf's JSON mapping, so NaN is the string `"NaN"`, and a server over a file
  store returns the infinities as `"Infinity"` / `"-Infinity"`. A SQL-backed tracking server (the
  usual one: sqlite, PostgreSQL, MySQL) cannot store an infinity and keeps ±Inf as
  ±1.7976931348623157e308, the largest double; that is what `runs/search` and the history endpoints
  return for a logged ±Inf.

`parse_value` reads every one of those spellings, and reads ±1.7976931348623157e308 as ±Inf wherever
it comes from (nobody logs exactly the largest double; everybody who logs Inf to a SQL store gets it).

Times are epoch milliseconds (-> seconds). Statuses: MLflow's `RunStatus` is RUNNING=1, SCHEDULED=2,
FINISHED=3, FAILED=4, KILLED=5; `meta.yaml` keeps the number, REST the name.
"""

from __future__ import annotations

import math
import sys

_SPECIAL = {
    "nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}
_DBL_MAX = sys.float_info.max

STATUS_NAMES = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
"""`mlflow.entities.RunStatus` numbers -> names."""
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
"""Statuses of a run that has ended."""


def parse_value(raw: object) -> float:
    """A metric value from a number or one of the spellings above; raise ValueError for anything else."""
    if isinstance(raw, bool):
        raise ValueError(f"not a number: {raw!r}")
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        special = _SPECIAL.get(text.lower())
        if special is not None:
            return special
        if "_" in text:  # float() would take "1_0"; MLflow never writes it
            raise ValueError(f"not a number: {raw!r}")
        value = float(text)
    else:
        raise ValueError(f"not a number: {raw!r}")
    if abs(value) == _DBL_MAX:
        return math.copysign(math.inf, value)
    return value


def value_key(value: float) -> str:
    """A value as a hashable, exact text (NaN equal to itself) for telling points apart."""
    return "nan" if math.isnan(value) else repr(value)


def ms_to_s(ms: int | float) -> float:
    """Epoch milliseconds -> epoch seconds."""
    return ms / 1000.0


def status_name(raw: object) -> str | None:
    """A run status from `meta.yaml` (a number) or REST (a name), as its name; None when unknown."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return STATUS_NAMES.get(raw)
    if isinstance(raw, str):
        name = raw.strip().upper()
        if name.isdigit():
            return STATUS_NAMES.get(int(name))
        return name if name in STATUS_NAMES.values() else None
    return None


def crashed_value(status: str) -> float:
    """`run.crashed` for an ended run: 1 for FAILED or KILLED, 0 for FINISHED."""
    return 0.0 if status == "FINISHED" else 1.0
