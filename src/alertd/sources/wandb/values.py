"""W&B values and names -> alertd samples: shared by the `wandb` and `wandb_dir` sources.

Training metrics keep the key the trainer logged (`loss`, `train/loss`: a `/` is part of the key).
Nested dicts logged as `{"eval": {"loss": 1}}` become `eval.loss`, as the W&B UI shows them and as
the `.wandb` file's `nested_key` path joins. Keys starting with `_` (`_step`, `_runtime`,
`_timestamp`, `_wandb`) are bookkeeping and are skipped, and so are media/histogram dicts (those
carrying a `_type`). Values: ints and floats, and the non-finite numbers as W&B writes them in JSON
(bare `NaN`, `Infinity`, `-Infinity` tokens, or those words as strings) become floats with NaN/Inf
kept. Booleans, strings, lists and other values are ignored.

System metrics (W&B `StatsRecord` items / the `system.*` keys of the events stream) map as follows;
`{i}` becomes the label `gpu="{i}"`:

| W&B key                          | alertd metric            | unit      |
| -------------------------------- | ------------------------ | --------- |
| `gpu.{i}.gpu`                    | `gpu.utilization`        | percent   |
| `gpu.{i}.memoryAllocated`        | `gpu.memory.utilization` | percent of memory allocated |
| `gpu.{i}.memoryAllocatedBytes`   | `gpu.memory.used`        | bytes     |
| `gpu.{i}.temp`                   | `gpu.temperature`        | °C        |
| `gpu.{i}.powerWatts`             | `gpu.power`              | watts     |
| `gpu.{i}.enforcedPowerLimitWatts`| `gpu.power.limit`        | watts     |
| `gpu.{i}.smClock`                | `gpu.clock.sm`           | MHz       |
| `gpu.{i}.fanSpeed`               | `gpu.fan.speed`          | percent   |
| anything else, e.g. `cpu`, `gpu.0.memory`, `gpu.process.0.gpu` | `system.<key>` (`system.cpu`) | as W&B |

(`gpu.{i}.memory` is NVML's memory-controller busy time, not allocation, so it stays `system.gpu.{i}.memory`.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

_NONFINITE = {
    "NaN": math.nan,
    "nan": math.nan,
    "Infinity": math.inf,
    "inf": math.inf,
    "+Infinity": math.inf,
    "-Infinity": -math.inf,
    "-inf": -math.inf,
}

_NUMBER_START = frozenset("-0123456789NI")

GPU_METRICS: dict[str, str] = {
    "gpu": "gpu.utilization",
    "memoryAllocated": "gpu.memory.utilization",
    "memoryAllocatedBytes": "gpu.memory.used",
    "temp": "gpu.temperature",
    "powerWatts": "gpu.power",
    "enforcedPowerLimitWatts": "gpu.power.limit",
    "smClock": "gpu.clock.sm",
    "fanSpeed": "gpu.fan.speed",
}
"""W&B per-GPU stat name -> alertd metric (the table in the module docstring)."""

_GPU_KEY = re.compile(r"^gpu\.(\d+)\.(\w+)$")
TERMINAL_STATES = frozenset({"finished", "crashed", "failed", "killed", "preempted"})
"""Run states after which no more data comes; all but `finished` count as crashed."""


def to_float(value: Any) -> float | None:
    """A W&B JSON value as a float (NaN/Inf kept), or None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _NONFINITE.get(value)
    return None


def parse_value_json(text: str) -> Any:
    """Decode one `value_json` (Python's json accepts W&B's bare NaN/Infinity tokens); bad JSON -> None."""
    if text and (text[0] in _NUMBER_START):
        try:  # the common case, a number: float() also reads NaN, Infinity and -Infinity
            return float(text)
        except ValueError:
            pass
    try:
        return json.loads(text)
    except ValueError:
        return None


def flatten_row(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Yield `(metric, value)` for every numeric, non-bookkeeping entry of one history row."""
    for key, value in row.items():
        if not prefix and key.startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if "_type" not in value:
                yield from flatten_row(value, f"{name}.")
            continue
        number = to_float(value)
        if number is not None:
            yield name, number


def system_metric(key: str) -> tuple[str, dict[str, str]]:
    """Map a bare W&B stats key (`gpu.0.gpu`, `cpu`) to an alertd metric name and extra labels."""
    match = _GPU_KEY.match(key)
    if match and match.group(2) in GPU_METRICS:
        return GPU_METRICS[match.group(2)], {"gpu": match.group(1)}
    return f"system.{key}", {}


def crashed_value(state: str) -> float:
    """`run.crashed`'s value for a terminal state: 0.0 for finished, 1.0 for any other end."""
    return 0.0 if state == "finished" else 1.0
