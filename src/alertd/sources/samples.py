"""The `samples` source: a JSON-lines file, one sample a line, tailed as it grows.

    {"metric": "train/loss", "labels": {"run": "exp1"}, "time": 1717000000.5, "step": 250, "value": "NaN"}

`time` is epoch seconds or an RFC 3339 string; `value` a number or "NaN", "+Inf", "-Inf" ("Inf",
"Infinity" too); `step` an integer or null; `labels` optional. A line that can't be read is reported
with its file and line number and skipped; a last line without its newline is not read until it is
complete.

The data never names the source: the live source sets `source` to its own name on every sample, and a
line's own `source` label, where it differs, is kept as `exported_source` (as Prometheus keeps a scraped
target's conflicting label). Otherwise one appended line labelled `{source: tb, run: victim}` would pass for the
TensorBoard source's run `victim`, whose verified writer the kill notifier may stop. A replay of recorded
samples (`read_samples`, the dry-run) keeps the recorded `source` labels and fills in only missing ones.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from alertd import progress
from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import SamplesConfig
from alertd.sources.fileopen import open_regular

log = logging.getLogger(__name__)
_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "infinity": math.inf, "+infinity": math.inf}
_SPECIAL |= {"-inf": -math.inf, "-infinity": -math.inf}
_REPORT_LINES = 4096


class SampleLineError(ValueError):
    """A line of a samples file that is not a sample."""


def parse_time(value: Any) -> float:
    """Epoch seconds from a number or an RFC 3339 string (a string without offset is UTC)."""
    if isinstance(value, bool) or value is None:
        raise SampleLineError(f"time must be epoch seconds or RFC 3339, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    try:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise SampleLineError(f"time must be epoch seconds or RFC 3339, got {value!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_value(value: Any) -> float:
    """A float from a number or one of the strings NaN, +Inf, -Inf."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in _SPECIAL:
        return _SPECIAL[value.strip().lower()]
    raise SampleLineError(f'value must be a number or "NaN", "+Inf", "-Inf", got {value!r}')


def parse_sample(line: str, source: str | None = None, *, replay: bool = False) -> Sample:
    """One line as a Sample; raise SampleLineError saying what is wrong.

    With `source`, the sample's `source` label is `source` and the line's own, where it differs, is kept as
    `exported_source` (`exported_exported_source` where that is taken too, and so on); with `replay` too, the line's own
    `source` is kept and `source` only fills it in where it is missing (recorded samples, dry-runs)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SampleLineError(f"not JSON: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(obj, dict):
        raise SampleLineError("a sample is a JSON object")
    unknown = set(obj) - {"metric", "labels", "time", "step", "value"}
    if unknown:
        raise SampleLineError(f"unknown key(s) {sorted(unknown)}")
    metric = obj.get("metric")
    if not isinstance(metric, str) or not metric:
        raise SampleLineError("metric must be a non-empty string")
    labels = obj.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str | int) for v in labels.values()):
        raise SampleLineError("labels must be an object of strings")
    if source is not None:
        labels = _with_source(labels, source, replay=replay)
    step = obj.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise SampleLineError(f"step must be an integer or null, got {step!r}")
    if "value" not in obj:
        raise SampleLineError("value is missing")
    return Sample(SeriesKey(metric, make_labels(labels)), parse_time(obj.get("time")), step, parse_value(obj["value"]))


def _with_source(labels: dict[str, Any], source: str, *, replay: bool) -> dict[str, Any]:
    if "source" not in labels:
        return {**labels, "source": source}
    if replay or str(labels["source"]) == source:
        return labels
    out = dict(labels)
    key = "exported_source"
    while key in out:
        key = f"exported_{key}"
    out[key] = out.pop("source")
    out["source"] = source
    return out


def read_samples(path: str, source: str | None = None) -> Iterator[Sample | tuple[int, str]]:
    """Every sample of a whole file, as recorded: a line's `source` label is kept, `source` fills in missing
    ones (a replay: the dry-run; the live source is `SamplesSource`). A bad line yields (line number,
    message) instead.

    How far it has read is reported to `alertd.progress` every `_REPORT_LINES` lines (a dry-run's progress bar)."""
    raw = open_regular(path)
    with io.TextIOWrapper(raw, encoding="utf-8") as f:
        observed = progress.active()
        if observed:
            progress.sized(path, os.fstat(raw.fileno()).st_size)
        for n, line in enumerate(f, 1):
            if observed and n % _REPORT_LINES == 0:
                progress.reached(path, raw.tell())  # the bytes the text layer has taken, 8 KiB at a time
            if line.strip():
                try:
                    yield parse_sample(line, source, replay=True)
                except SampleLineError as exc:
                    yield n, str(exc)
        if observed:
            progress.reached(path, raw.tell())


class SamplesSource:
    """Tails a JSON-lines samples file by byte offset."""

    def __init__(self, cfg: SamplesConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.path = cfg.path
        self.offset = 0
        self.line = 0
        self.bad_lines = 0

    def read_new(self) -> list[Sample]:
        """The samples of the complete lines added since the last read."""
        try:
            with open_regular(self.path) as f:
                if os.fstat(f.fileno()).st_size < self.offset:
                    log.warning("samples file %s shrank: reading it again from the start", self.path)
                    self.offset, self.line = 0, 0
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        out = []
        for raw in data[:end].split(b"\n")[:-1]:
            self.line += 1
            if not raw.strip():
                continue
            try:
                out.append(parse_sample(raw.decode("utf-8"), self.name))
            except (SampleLineError, UnicodeDecodeError) as exc:
                self.bad_lines += 1
                log.warning("%s:%d: skipped: %s", self.path, self.line, exc)
        self.offset += end
        return out

    async def poll(self, now: float) -> list[Sample]:
        """New samples since the last poll."""
        return await asyncio.to_thread(self.read_new)

    async def aclose(self) -> None:
        """Nothing to release."""

    def cursor(self) -> dict[str, int]:
        """Where the next read starts."""
        return {"offset": self.offset, "line": self.line}

    def restore(self, cursor: dict[str, int]) -> None:
        """Resume from a cursor."""
        self.offset, self.line = int(cursor.get("offset", 0)), int(cursor.get("line", 0))
