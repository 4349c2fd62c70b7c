"""The `mlflow` source over a local file store: `mlruns/<experiment>/<run>/metrics/<key>`, tailed.

Layout, as MLflow's `FileStore` writes it (checked against mlflow 3.17, which refuses to write a file
store unless `MLFLOW_ALLOW_FILE_STORE=true`; reading one needs nothing):

    mlruns/<experiment_id>/meta.yaml                       name, lifecycle_stage
    mlruns/<experiment_id>/<run_id>/meta.yaml              run_id, run_name, status (1..5), end_time (ms)
    mlruns/<experiment_id>/<run_id>/metrics/<key>          "timestamp value step" lines, appended
    mlruns/<experiment_id>/<run_id>/metrics/train/loss     a key with `/` lives in sub-directories

Skipped: `.trash` (deleted experiments) and every name starting with `.`, `models` (the model
registry), an experiment's `tags`, `datasets`, `traces` and `models` folders, directories without a
readable `meta.yaml`, deleted runs and experiments (`lifecycle_stage: deleted`).

Each poll (all of it in a worker thread): the root is listed, each experiment's `meta.yaml` is
re-read when it changed (size or mtime), and each run's `meta.yaml` likewise. A run not yet ended has
its `metrics/` walked for new keys and every metric file tailed with `LineTail` (only new lines are
read; the file is closed again after each read, so a sweep of many runs holds no descriptors). A run
that has ended is read one last time, yields its end once, and is then only `stat`-ed; it is read again
if its `meta.yaml` changes (a run resumed with `start_run(run_id=...)`), and a later, different end is
reported again. `meta.yaml` is read up to 64 KiB with alertd's bounded YAML loader (`alertd.yamlfile`: at
most MAX_META_VALUES values and 64 Ki characters with its aliases expanded, so an alias bomb is refused
before it is built); as MLflow rewrites it in place, a half-written one is silently retried at the next
poll and reported only when it stays bad. One over a bound is reported at once, and at every poll that
meets it in the source's health (`take_cuts`: `/api/v1/sources`, `alertd.source.up`); the store's other
runs are read on. Names (`run_name`, the experiment's `name`) are taken only as text, at most 4 KiB.

`runs: running` reads the runs that are RUNNING (or SCHEDULED) when first seen, all their history
included, and each one's end; a run already ended when first seen is skipped, unless it started after
this source's first poll (less `RECENT` seconds): a run that crashed between two polls is read.
`runs: all` reads every run. `experiments` keeps the experiments whose id or name is listed.

A line that is not a metric point is logged with its file and line number and skipped (at most
`_BAD_LINES_LOGGED` per file; all are counted in `bad_lines`). A file rewritten shorter is read again
from its start, skipping as many lines as were read before.

`cursor()` / `restore()`: the first poll's time, and per run its experiment, the end already reported,
whether it was skipped, and per metric file the byte offset and line number reached.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from alertd import progress
from alertd.errors import ConfigError, SourceError
from alertd.model import Sample
from alertd.sources.config import MlflowConfig
from alertd.sources.fileopen import open_regular
from alertd.sources.limits import Cuts
from alertd.sources.linetail import LineTail
from alertd.sources.mlflow.labels import RunLabels, SeriesKeys
from alertd.sources.mlflow.values import TERMINAL, ms_to_s, parse_value, status_name
from alertd.yamlfile import parse_data

log = logging.getLogger(__name__)

MAX_META = 64 << 10
"""The largest `meta.yaml` read (MLflow's are a few hundred bytes)."""
MAX_META_VALUES = 1000
"""The most YAML values a `meta.yaml` may hold, its aliases expanded (MLflow writes about 15, and no alias)."""
_MAX_NAME_TAG = 4 << 10
_ROOT_SKIP = frozenset({"models"})
_EXPERIMENT_SKIP = frozenset({"tags", "datasets", "traces", "models"})
_BAD_LINES_LOGGED = 20
_SETTLE = 2.0
"""Seconds after its last change before a bad `meta.yaml` is reported (not one being rewritten)."""
_ACTIVE = frozenset({"RUNNING", "SCHEDULED"})
RECENT = 60.0
"""`runs: running` also reads an ended run that started at most this long before the first poll, or after."""


class OverLimit(ValueError):
    """A `meta.yaml` over one of the bounds of its reading (its size, its values or characters expanded)."""


class BadLine(ValueError):
    """A line of a metric file that is not `timestamp value [step [dataset digest]]`."""


def parse_line(line: str) -> tuple[int, float, int]:
    """(timestamp ms, value, step) of one metric-file line, as MLflow's `FileStore` reads it."""
    parts = line.strip().split(" ")
    if len(parts) not in (2, 3, 5):
        raise BadLine(f"expected 2, 3 or 5 fields, got {len(parts)}")
    try:
        ts = int(parts[0])
    except ValueError:
        raise BadLine(f"timestamp is not an integer: {parts[0][:40]!r}") from None
    try:
        value = parse_value(parts[1])
    except ValueError:
        raise BadLine(f"value is not a number: {parts[1][:40]!r}") from None
    try:
        step = int(parts[2]) if len(parts) >= 3 else 0
    except ValueError:
        raise BadLine(f"step is not an integer: {parts[2][:40]!r}") from None
    return ts, value, step


def read_meta(path: str) -> dict[str, Any]:
    """A `meta.yaml` as a dict (at most MAX_META bytes, MAX_META_VALUES values); OverLimit past a bound,
    ValueError when it is not one."""
    with open_regular(path) as f:
        data = f.read(MAX_META + 1)
    if len(data) > MAX_META:
        raise OverLimit(f"larger than {MAX_META} bytes (the limit of a meta.yaml)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    try:
        meta = parse_data(text, path, max_nodes=MAX_META_VALUES, max_chars=MAX_META)
    except ConfigError as exc:
        problem = exc.problems[0]
        if "expands to more than" in problem.message:
            raise OverLimit(f"{problem.message}: over the limit of a meta.yaml; refused unread") from None
        raise ValueError(problem.message) from None
    if not isinstance(meta, dict):
        raise ValueError("not a mapping")
    return meta


def text_of(value: object, limit: int = _MAX_NAME_TAG) -> str:
    """A name from YAML data: a string or a number as text (at most `limit` characters), anything else ""."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)[:limit]
    return ""


def file_root(uri: str) -> str:
    """The directory of a file-store tracking URI: a path, `./mlruns`, `file:/abs`, `file:///abs`."""
    if not uri.startswith("file:"):
        return os.path.expanduser(uri)
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"a file URI on another host ({parts.netloc}) is not readable here")
    return unquote(parts.path) or "."


def _sig(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


@dataclass(slots=True)
class _Experiment:
    exp_id: str
    name: str = ""
    active: bool = False
    sig: tuple[int, int] | None = None


@dataclass(slots=True)
class _Metric:
    """One metric file: its tail and the number of lines read."""

    tail: LineTail
    line: int = 0
    bad_logged: int = 0


@dataclass(slots=True)
class _Run:
    run_id: str
    exp_id: str
    labels: RunLabels
    status: str = ""
    end_time: int | None = None
    end: int | None = None
    """The end (end_time, ms; -1 when unknown) already reported."""
    skipped: bool = False
    deleted: bool = False
    done: bool = False
    """Ended and read after its end: only its meta.yaml is watched."""
    sig: tuple[int, int] | None = None
    files: dict[str, _Metric] = field(default_factory=dict)
    saved: dict[str, list[int]] = field(default_factory=dict)
    """Where reading stopped in files not followed now (from a cursor, or of an ended run): key -> [offset, line]."""


class FileStoreSource:
    """Reads the runs of one MLflow file store; see the module docstring."""

    def __init__(self, cfg: MlflowConfig, root: str) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.cfg = cfg
        self.root = root
        self.keys = SeriesKeys(cfg.name)
        self.bad_lines = 0
        self._wanted = set(cfg.experiments) if cfg.experiments is not None else None
        self._experiments: dict[str, _Experiment] = {}
        self._runs: dict[str, _Run] = {}
        self._bad_meta: dict[str, tuple[int, int]] = {}
        self._missing_logged = False
        self._since: float | None = None
        """The first poll's time (epoch s)."""
        self._lock = threading.Lock()
        """Held by a poll (in its worker thread), `cursor()`, `restore()` and `aclose()`."""
        self.cuts = Cuts()

    def __repr__(self) -> str:
        return f"FileStoreSource(name={self.name!r}, root={self.root!r})"

    async def poll(self, now: float) -> list[Sample]:
        """New points and run ends since the last poll."""
        return await asyncio.to_thread(self._poll, now)

    async def aclose(self) -> None:
        """Close any file still open (none is between polls)."""
        with self._lock:
            for run in self._runs.values():
                for metric in run.files.values():
                    metric.tail.close()

    # scanning

    def _poll(self, now: float) -> list[Sample]:
        with self._lock:
            return self._scan(now)

    def _scan(self, now: float) -> list[Sample]:
        out: list[Sample] = []
        if self._since is None:
            self._since = now
        try:
            entries = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        except FileNotFoundError:
            if not self._missing_logged:
                log.info("mlflow source %s: %s does not exist (yet); waiting for it", self.name, self.root)
                self._missing_logged = True
            return out
        except OSError as exc:
            raise SourceError(f"mlflow source {self.name}: can't list {self.root}: {exc.strerror or exc}") from None
        self._missing_logged = False
        for name in entries:
            if name.startswith(".") or name in _ROOT_SKIP:
                continue
            exp = self._experiment(name)
            if exp is None or not exp.active:
                continue
            if self._wanted is not None and exp.exp_id not in self._wanted and exp.name not in self._wanted:
                continue
            self._scan_experiment(exp, now, out)
        return out

    def _experiment(self, dirname: str) -> _Experiment | None:
        path = os.path.join(self.root, dirname, "meta.yaml")
        exp = self._experiments.get(dirname)
        try:
            st = os.stat(path)
        except OSError:
            return exp
        if exp is not None and exp.sig == _sig(st):
            return exp
        try:
            meta = read_meta(path)
        except OverLimit as exc:
            self._over_limit(path, st, exc)
            return exp
        except (OSError, ValueError):
            return exp  # not an experiment, or being written: looked at again next poll
        if text_of(meta.get("experiment_id", "")) != dirname:
            return exp
        exp = self._experiments[dirname] = _Experiment(
            dirname,
            name=text_of(meta.get("name")),
            active=meta.get("lifecycle_stage", "active") == "active",
            sig=_sig(st),
        )
        return exp

    def _scan_experiment(self, exp: _Experiment, now: float, out: list[Sample]) -> None:
        exp_dir = os.path.join(self.root, exp.exp_id)
        try:
            names = sorted(e.name for e in os.scandir(exp_dir) if e.is_dir() and e.name not in _EXPERIMENT_SKIP)
        except OSError:
            return
        for run_id in names:
            if not run_id.startswith("."):
                self._scan_run(exp, run_id, now, out)

    def _scan_run(self, exp: _Experiment, run_id: str, now: float, out: list[Sample]) -> None:
        run_dir = os.path.join(self.root, exp.exp_id, run_id)
        meta_path = os.path.join(run_dir, "meta.yaml")
        try:
            st = os.stat(meta_path)
        except OSError:
            return  # not a run, or one being created
        run = self._runs.get(run_id)
        if run is None or run.sig != _sig(st):
            run = self._read_run_meta(exp, run_id, meta_path, st, now)
            if run is None:
                return
        elif run.done or run.skipped or run.deleted:
            return
        if run.deleted:
            return
        if run.skipped:
            if run.status not in _ACTIVE:
                return
            run.skipped = False  # resumed: read from its start
        self._read_metrics(run, run_dir, out)
        if run.status not in TERMINAL:
            run.done = False
            return
        end = run.end_time if run.end_time is not None else -1
        if run.end != end:
            time = ms_to_s(run.end_time) if run.end_time is not None else now
            out.extend(self.keys.run_end(run.labels, run.status, time))
            run.end = end
        run.done = True
        # Keep only where each file was left: a store of many ended runs costs a few ints per file.
        run.saved.update((key, [m.tail.offset, m.line]) for key, m in run.files.items())
        run.files.clear()
        self.keys.forget(run.run_id)

    def _read_run_meta(self, exp: _Experiment, run_id: str, path: str, st: os.stat_result, now: float) -> _Run | None:
        """Read a run's meta.yaml into `self._runs`; None when it can't be read (yet)."""
        try:
            meta = read_meta(path)
            if text_of(meta.get("run_id", "")) != run_id:
                raise ValueError(f"its run_id is {text_of(meta.get('run_id'))[:40]!r}, not its directory's name")
            status = status_name(meta.get("status", 1))
            if status is None:
                raise ValueError(f"unknown status {str(meta.get('status'))[:40]!r}")
            end_time = meta.get("end_time")
            if end_time is not None and (isinstance(end_time, bool) or not isinstance(end_time, int)):
                raise ValueError(f"end_time is not an integer: {str(end_time)[:40]!r}")
        except OSError:
            return None  # gone since the stat: looked at again next poll
        except OverLimit as exc:  # refused unread, at every poll that meets it (it is never half-written)
            self._over_limit(path, st, exc)
            return None
        except ValueError as exc:
            # MLflow rewrites meta.yaml in place: a fresh one may be half-written. Report it once it is
            # older than _SETTLE seconds, once per version of the file.
            if now - st.st_mtime > _SETTLE and self._bad_meta.get(path) != _sig(st):
                log.warning("mlflow source %s: %s: skipped: %s", self.name, path, exc)
                self._bad_meta[path] = _sig(st)
            return None
        self._bad_meta.pop(path, None)
        name = text_of(meta.get("run_name")) or self._run_name_tag(os.path.dirname(path))
        labels = RunLabels(run_id, name, exp.name)
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run(run_id, exp.exp_id, labels)
            run.skipped = self.cfg.runs == "running" and status not in _ACTIVE and not self._recent(meta)
        elif run.labels != labels:
            self.keys.forget(run_id)
            run.labels = labels
        run.exp_id, run.status, run.end_time, run.sig = exp.exp_id, status, end_time, _sig(st)
        run.deleted = meta.get("lifecycle_stage", "active") != "active"
        run.done = False
        return run

    def _over_limit(self, path: str, st: os.stat_result, exc: OverLimit) -> None:
        """A meta.yaml over a bound: logged once per version of the file, in the source's health at each poll."""
        message = f"mlflow source {self.name}: {path}: skipped: {exc}"
        self.cuts.add(message)
        if self._bad_meta.get(path) != _sig(st):
            log.warning("%s", message, extra={"source": self.name})
            self._bad_meta[path] = _sig(st)

    def take_cuts(self) -> list[str]:
        """What the polls since the last call left out at a limit (`alertd.sources.limits`)."""
        return self.cuts.take()

    def _recent(self, meta: dict[str, Any]) -> bool:
        """Whether a run started after the first poll (less RECENT seconds)."""
        start = meta.get("start_time")
        since = self._since if self._since is not None else 0.0
        return isinstance(start, int) and not isinstance(start, bool) and ms_to_s(start) >= since - RECENT

    @staticmethod
    def _run_name_tag(run_dir: str) -> str:
        try:
            with open_regular(os.path.join(run_dir, "tags", "mlflow.runName")) as f:
                return f.read(_MAX_NAME_TAG).decode("utf-8", "replace").strip()
        except OSError:
            return ""

    # metric files

    def _read_metrics(self, run: _Run, run_dir: str, out: list[Sample]) -> None:
        metrics_dir = os.path.join(run_dir, "metrics")
        for dirpath, dirnames, filenames in os.walk(metrics_dir):
            dirnames.sort()
            for filename in sorted(filenames):
                path = os.path.join(dirpath, filename)
                key = os.path.relpath(path, metrics_dir).replace(os.sep, "/")
                metric = run.files.get(key)
                if metric is None:
                    metric = run.files[key] = _Metric(LineTail(path))
                    saved = run.saved.pop(key, None)
                    if saved is not None:
                        metric.tail.restore({"offset": saved[0]})
                        metric.line = saved[1]
                self._read_metric(run, key, metric, out)

    def _read_metric(self, run: _Run, key: str, metric: _Metric, out: list[Sample]) -> None:
        tail = metric.tail
        offset = tail.offset
        try:
            chunk = tail.read()
        except OSError as exc:
            log.warning("mlflow source %s: can't read %s: %s", self.name, tail.path, exc.strerror or exc)
            return
        finally:
            tail.close()
        skip = 0
        if chunk.reset:
            skip, metric.line = metric.line, 0
        series = self.keys.key(run.labels, key)
        start = 0 if chunk.reset else offset
        for line in itertools.chain.from_iterable(progress.batches(tail.path, chunk.lines, start, tail.offset)):
            metric.line += 1
            if metric.line <= skip or not line.strip():
                continue
            try:
                ts, value, step = parse_line(line)
            except BadLine as exc:
                self.bad_lines += 1
                metric.bad_logged += 1
                if metric.bad_logged <= _BAD_LINES_LOGGED:
                    last = metric.bad_logged == _BAD_LINES_LOGGED
                    more = " (further bad lines of this file are not logged)" if last else ""
                    log.warning("%s:%d: skipped: %s%s", tail.path, metric.line, exc, more)
                continue
            out.append(Sample(series, ms_to_s(ts), step, value))

    # cursor

    def cursor(self) -> dict[str, Any]:
        """Per run: experiment, reported end, skipped, and each metric file's [offset, line]."""
        runs: dict[str, Any] = {}
        with self._lock:
            for run in self._runs.values():
                files = {key: [m.tail.offset, m.line] for key, m in run.files.items()}
                files.update(run.saved)
                runs[run.run_id] = {"exp": run.exp_id, "end": run.end, "skipped": run.skipped, "files": files}
        return {"since": self._since, "runs": runs}

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a `cursor()`: files are read on from their offsets, reported ends not repeated."""
        with self._lock:
            since = cursor.get("since")
            if isinstance(since, int | float) and not isinstance(since, bool):
                self._since = float(since)
            for run_id, entry in (cursor.get("runs") or {}).items():
                if isinstance(entry, dict):
                    self._restore_run(str(run_id), entry)

    def _restore_run(self, run_id: str, entry: dict[str, Any]) -> None:
        files = entry.get("files") or {}
        saved = {str(k): [int(v[0]), int(v[1])] for k, v in files.items() if isinstance(v, list) and len(v) == 2}
        end = entry.get("end")
        self._runs[run_id] = _Run(
            run_id,
            str(entry.get("exp", "")),
            RunLabels(run_id),
            end=end if isinstance(end, int) else None,
            skipped=bool(entry.get("skipped")),
            saved=saved,
        )
