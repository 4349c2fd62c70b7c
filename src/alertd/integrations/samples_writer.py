"""Writes samples in the `samples` source's JSON-lines format; framework-free.

One line per value, exactly what `alertd.sources.samples` reads:

    {"metric":"train/loss","labels":{"run":"exp1","host":"node1","pid":"4242"},"time":1717000000.5,"step":250,"value":"NaN"}

The file is opened for appending (`O_APPEND`) and each line is handed to the kernel whole, in one `write`
call, as soon as it is written, so alertd's `samples` source can tail it while the run goes on. The ranks of a
distributed run all append to the same file, each line labelled with its rank (`alertd.integrations.ranks`):
an `O_APPEND` write of one line is placed at the end of the file and never interleaved with another process's
on a local file system (and on Lustre and GPFS); on NFS, whose appends from two nodes can overwrite each other,
give a path holding `{rank}` (`ALERTD_SAMPLES_FILE=/shared/out/alertd-samples.rank{rank}.jsonl`) for a file
per rank. One file keeps a run one `samples` source, so the ranks stay members of one run. NaN and ±Inf are
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
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, metric: str, value: float, step: int | None, labels: Mapping[str, str] | None = None) -> None:
        """Append one sample; `labels` are added to the writer's own."""
        if self._fd is None or self._failed:
            return
        sample = {
            "metric": metric,
            "labels": {**self.labels, **(labels or {})},
            "time": round(time.time(), 6),
            "step": step,
            "value": json_value(float(value)),
        }
        line = (json.dumps(sample, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
        try:
            done = os.write(self._fd, line)  # one call: the line is appended whole
            while done < len(line):  # a regular file takes it all at once; a short write goes on where it stopped
                done += os.write(self._fd, line[done:])
        except OSError as e:
            self._failed = True
            log.error("alertd: can't write the samples file %s (%s): no more samples are recorded", self.path, e)

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as e:
                log.error("alertd: can't close the samples file %s: %s", self.path, e)
            self._fd = None
