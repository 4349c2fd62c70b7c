"""Writes samples in the `samples` source's JSON-lines format; framework-free.

One line per value, exactly what `alertd.sources.samples` reads:

    {"metric":"train/loss","labels":{"run":"exp1","host":"node1","pid":"4242"},"time":1717000000.5,"step":250,"value":"NaN"}

The file is opened for appending and line-buffered, so every line reaches the file (one `write`, whole) as
soon as it is written, and alertd's `samples` source can tail it while the run goes on. NaN and ±Inf are
written as the strings "NaN", "+Inf" and "-Inf" (JSON has no such numbers). A file that can't be opened
fails the start of training (before it costs anything); a write error later (a full disk) is logged once and
the values after it are dropped: recording a run never stops a run that is under way.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Mapping
from typing import TextIO

log = logging.getLogger("alertd.integrations")

SAMPLES_FILE_ENV = "ALERTD_SAMPLES_FILE"
RUN_ENV = "ALERTD_RUN"
DEFAULT_SAMPLES_NAME = "alertd-samples.jsonl"


def json_value(value: float) -> float | str:
    """A value as the samples format writes it: a number, or "NaN", "+Inf", "-Inf"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def run_labels(run: str) -> dict[str, str]:
    """The labels every sample of this process carries: `run`, `host` and `pid`."""
    return {"run": run, "host": socket.gethostname(), "pid": str(os.getpid())}


class SamplesWriter:
    """Appends samples to one JSON-lines file, each line flushed as it is written."""

    def __init__(self, path: str | os.PathLike[str], labels: Mapping[str, str]) -> None:
        self.path = os.fspath(path)
        self.labels = dict(labels)
        self._failed = False
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (kept open)

    def write(self, metric: str, value: float, step: int | None, labels: Mapping[str, str] | None = None) -> None:
        """Append one sample; `labels` are added to the writer's own."""
        if self._file is None or self._failed:
            return
        sample = {
            "metric": metric,
            "labels": {**self.labels, **(labels or {})},
            "time": round(time.time(), 6),
            "step": step,
            "value": json_value(float(value)),
        }
        line = json.dumps(sample, separators=(",", ":"), allow_nan=False) + "\n"
        try:
            self._file.write(line)
        except OSError as e:
            self._failed = True
            log.error("alertd: can't write the samples file %s (%s): no more samples are recorded", self.path, e)

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:
                log.error("alertd: can't close the samples file %s: %s", self.path, e)
            self._file = None
