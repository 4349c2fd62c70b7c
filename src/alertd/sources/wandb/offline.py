"""The `wandb_dir` source: reads local `.wandb` run files (offline runs, or live runs being written).

`path` may be the `wandb/` directory itself, its parent (the training working directory: `wandb/`
or `.wandb/` inside it is used), one run directory, or one `.wandb` file. Files found:
`<dir>/run-*/run-*.wandb`, `<dir>/offline-run-*/run-*.wandb`, and `<path>/run-*.wandb`.
New run directories are picked up at every poll. Woken by file-system notifications (`read_changed`),
only the run files named, or found in the directories named, are read: the cost follows the change, not
the number of runs, and the samples are those a full poll gives for these files.

Each file is tailed (see `wandb_records.LogReader`): history rows become training-metric samples,
stats records system-metric samples (names in `wandb_values`), the run record `run.started` = 1 (at
the run's start time), and the exit record `run.exit_code`, one `run.finished` = 1 and one
`run.crashed` sample (1 when the exit code is not 0). A run killed hard leaves no exit record: in a
replay it is then `lost` (see `alertd.runs.tracker`). Labels: `source`, `run`
(`entity/project/run_id` when the run record names all three, else the run id; offline runs have
no entity) and `run_name` (the display name, when set). Damaged chunks or records are skipped, logged
once as a warning with the file and offset, and counted in `corrupt_records`; so is a record that can't
be decoded or turned into samples for any reason (a value nested too deeply, say): the records around
it are read.

What goes wrong with one file stays with it: a file that can't be read (a FIFO or device named like a
run file is never opened; permissions, I/O errors, anything else) is warned about once per distinct
error, with its path, and retried at each poll, while every other file is read as usual.
"""

from __future__ import annotations

import asyncio
import fnmatch
import glob
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from alertd import progress
from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import WandbDirConfig
from alertd.sources.fileopen import NotRegularFile
from alertd.sources.wandb.proto import ExitInfo, HistoryRow, ProtoError, RunInfo, StatsRow, decode_record
from alertd.sources.wandb.records import Corruption, LogReader
from alertd.sources.wandb.values import flatten_row, system_metric, to_float

log = logging.getLogger(__name__)
_RUN_FILE = re.compile(r"^run-(.+)\.wandb$")
_TOP_DIRS = ("wandb", ".wandb")
"""The directories under `path` that may hold run directories (besides `path` itself)."""
_RUN_NAME = re.compile(fnmatch.translate("run-*.wandb")).match
"""A name that `find_run_files` takes for a run file (its glob pattern)."""
_RUN_DIR = re.compile(f"(?:{fnmatch.translate('run-*')})|(?:{fnmatch.translate('offline-run-*')})").match
"""A name that `find_run_files` takes for a run directory (its glob patterns)."""


@dataclass(slots=True)
class _RunFile:
    """What is known about one run file between polls."""

    reader: LogReader
    run: RunInfo
    ended: bool = False
    last_time: float | None = None
    error: str = ""
    keys: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesKey] = field(default_factory=dict)


def find_run_files(path: str) -> list[str]:
    """Every `.wandb` run file under `path` (see the module docstring for the layouts accepted).

    Anything but a directory is listed (a FIFO named like a run file too: the reader refuses it, and
    the source says so once).
    """
    if os.path.exists(path) and not os.path.isdir(path):
        return [path]
    dirs = [path, *(os.path.join(path, d) for d in ("wandb", ".wandb"))]
    found: set[str] = set(glob.glob(os.path.join(glob.escape(path), "run-*.wandb")))
    for d in dirs:
        base = glob.escape(d)
        for pattern in ("run-*/run-*.wandb", "offline-run-*/run-*.wandb"):
            found.update(glob.glob(os.path.join(base, pattern)))
    return sorted(p for p in found if not os.path.isdir(p))


class WandbDirSource:
    """Tails the `.wandb` files of every run under `cfg.path`."""

    def __init__(self, cfg: WandbDirConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.path = cfg.path
        self._root = os.path.abspath(cfg.path)
        """`path` as file-system notifications name it (see `read_changed`)."""
        self.corrupt_records = 0
        self._files: dict[str, _RunFile] = {}

    def __repr__(self) -> str:
        return f"WandbDirSource(name={self.name!r}, path={self.path!r})"

    async def poll(self, now: float) -> Sequence[Sample]:
        """New samples since the last poll (file reading runs in a worker thread)."""
        return await asyncio.to_thread(self.read_new)

    async def aclose(self) -> None:
        """Nothing to release: files are opened only while read."""

    async def poll_changed(self, now: float, paths: frozenset[str]) -> Sequence[Sample]:
        """The samples new in `paths`, what file-system notifications reported (see `read_changed`); file
        reading runs in a worker thread."""
        return await asyncio.to_thread(self.read_changed, paths)

    def read_new(self) -> list[Sample]:
        """Read every run file's new complete records and return their samples."""
        out: list[Sample] = []
        paths = find_run_files(self.path)
        if progress.active():  # the sizes of all the files up front: a progress bar's total
            progress.sized_files(paths)
        for path in paths:
            self._read_file(path, out)
        return out

    def read_changed(self, paths: frozenset[str]) -> list[Sample]:
        """Read only the run files that `paths` (absolute, as notifications report them) name or hold.

        A run file named is read; a directory named where run files or run directories belong
        (`<path>/run-*/`, `<path>/offline-run-*/`, `<path>/wandb/`, `<path>/wandb/run-*/`, ...) is listed
        and the run files in it are read; anything else is ignored. The files are those `find_run_files`
        would find among them, read in its order: the samples are those a full `read_new` would give for
        these files, at a cost that follows the change, not the number of runs. `path` itself reported,
        or a `path` that is not a directory, is a full `read_new`.
        """
        root = self._root
        if root in paths or not os.path.isdir(root):
            return self.read_new()
        prefix = root if root.endswith(os.sep) else root + os.sep
        found: set[str] = set()
        for changed in paths:
            if changed.startswith(prefix) and len(changed) > len(prefix):
                self._changed(changed[len(prefix) :].split(os.sep), found)
        out: list[Sample] = []
        for path in sorted(found):
            self._read_file(path, out)
        return out

    def _changed(self, parts: list[str], found: set[str]) -> None:
        """Add to `found` the run files that the changed entry `parts` (relative to `path`) is or holds,
        as `find_run_files` names them."""
        where = os.path.join(self.path, *parts)
        if len(parts) == 1:
            name = parts[0]
            if name in _TOP_DIRS:
                for run_dir in _entries(where):
                    if _RUN_DIR(run_dir) and os.path.isdir(os.path.join(where, run_dir)):
                        _add_run_files(os.path.join(where, run_dir), found)
            elif _RUN_DIR(name) and os.path.isdir(where):
                _add_run_files(where, found)
            elif _RUN_NAME(name) and _is_run_file(where):
                found.add(where)
        elif len(parts) == 2:
            top, name = parts
            if top in _TOP_DIRS and _RUN_DIR(name) and os.path.isdir(where):
                _add_run_files(where, found)
            elif _RUN_DIR(top) and _RUN_NAME(name) and _is_run_file(where):
                found.add(where)
        elif len(parts) == 3:
            top, run_dir, name = parts
            if top in _TOP_DIRS and _RUN_DIR(run_dir) and _RUN_NAME(name) and _is_run_file(where):
                found.add(where)

    def _read_file(self, path: str, out: list[Sample]) -> None:
        """Read one run file's new complete records into `out`; what goes wrong with it stays with it."""
        state = self._files.get(path)
        if state is None:
            state = self._files[path] = _RunFile(LogReader(path), RunInfo(run_id=_run_id(path)))
        try:
            records, problems = state.reader.read()
        except NotRegularFile as exc:
            self._fail(state, f"skipped {exc}: not read")
            return
        except OSError as exc:
            self._fail(state, f"cannot read {path}: {exc}; retrying at the next poll")
            return
        except Exception as exc:  # anything else stays with this file: the other files are read
            where = f"{path} at offset {state.reader.offset}"
            self._fail(state, f"error reading {where}: {type(exc).__name__}: {exc}; retrying at the next poll")
            return
        if state.error:
            log.info("wandb_dir %s: %s is readable again", self.name, path)
            state.error = ""
        for problem in problems:
            self._report(path, problem)
        first = records[0][0] if records else state.reader.offset
        for part in progress.batches(path, records, first, state.reader.offset):
            for offset, payload in part:
                self._decode(path, state, offset, payload, out)

    def _fail(self, state: _RunFile, message: str) -> None:
        if state.error != message:
            log.warning("wandb_dir %s: %s", self.name, message)
            state.error = message

    def _report(self, path: str, problem: Corruption) -> None:
        self.corrupt_records += 1
        log.warning(
            "wandb_dir %s: skipped a damaged record in %s at offset %d: %s",
            self.name,
            path,
            problem.offset,
            problem.reason,
        )

    def _decode(self, path: str, state: _RunFile, offset: int, payload: bytes, out: list[Sample]) -> None:
        try:
            record = decode_record(payload)
        except ProtoError as exc:
            self._report(path, Corruption(offset, f"bad record: {exc}"))
            return
        except Exception as exc:  # one record's trouble is that record's: skipped, the next ones are read
            self._report(path, Corruption(offset, f"record not decoded: {type(exc).__name__}: {exc}"))
            return
        samples: list[Sample] = []
        try:
            self._samples(state, record, samples)
        except Exception as exc:
            self._report(path, Corruption(offset, f"record not read: {type(exc).__name__}: {exc}"))
            return
        out += samples

    def _samples(self, state: _RunFile, record: object, out: list[Sample]) -> None:
        if isinstance(record, HistoryRow):
            self._history(state, record, out)
        elif isinstance(record, StatsRow):
            self._stats(state, record, out)
        elif isinstance(record, RunInfo):
            record.run_id = record.run_id or state.run.run_id
            state.run = record
            state.keys.clear()
            if record.start_time is not None:  # a W&B run ends with an exit record: without one it is lost
                out.append(Sample(self._key(state, "run.started"), record.start_time, None, 1.0))
        elif isinstance(record, ExitInfo) and not state.ended:
            self._exit(state, record, out)

    def _key(self, state: _RunFile, metric: str, extra: dict[str, str] | None = None) -> SeriesKey:
        extra_items = tuple(sorted(extra.items())) if extra else ()
        key = state.keys.get((metric, extra_items))
        if key is None:
            run = state.run
            labels = {"source": self.name, "run": _run_label(run), "run_name": run.display_name}
            labels.update(extra_items)
            key = state.keys[(metric, extra_items)] = SeriesKey(metric, make_labels(labels))
        return key

    def _history(self, state: _RunFile, row: HistoryRow, out: list[Sample]) -> None:
        values = row.values
        step_value = to_float(values.get("_step"))
        step = int(step_value) if step_value is not None and step_value == step_value else row.step
        t = to_float(values.get("_timestamp"))
        if t is None:
            runtime = to_float(values.get("_runtime"))
            t = (state.run.start_time or 0.0) + (runtime or 0.0)
        state.last_time = t
        for metric, value in flatten_row(values):
            out.append(Sample(self._key(state, metric), t, step, value))

    def _stats(self, state: _RunFile, row: StatsRow, out: list[Sample]) -> None:
        t = row.time if row.time is not None else state.last_time or 0.0
        state.last_time = t
        for key, raw in row.values.items():
            value = to_float(raw)
            if value is not None:
                metric, extra = system_metric(key)
                out.append(Sample(self._key(state, metric, extra), t, None, value))

    def _exit(self, state: _RunFile, record: ExitInfo, out: list[Sample]) -> None:
        state.ended = True
        times = [t for t in (state.last_time,) if t is not None]
        if state.run.start_time is not None:
            times.append(state.run.start_time + record.runtime)
        t = max(times) if times else 0.0
        out.append(Sample(self._key(state, "run.exit_code"), t, None, float(record.exit_code)))
        out.append(Sample(self._key(state, "run.finished"), t, None, 1.0))
        out.append(Sample(self._key(state, "run.crashed"), t, None, 0.0 if record.exit_code == 0 else 1.0))

    def cursor(self) -> dict[str, Any]:
        """Where each file was read up to, and what it said about its run: for a restart."""
        return {
            "files": {
                path: {
                    "offset": s.reader.offset,
                    "run": asdict(s.run),
                    "ended": s.ended,
                    "last_time": s.last_time,
                }
                for path, s in self._files.items()
            }
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        """Continue from a `cursor()` taken earlier: files are read on from where they were left."""
        for path, entry in cursor.get("files", {}).items():
            run = RunInfo(**entry.get("run", {}))
            state = _RunFile(LogReader(path, int(entry.get("offset", 0))), run)
            state.ended = bool(entry.get("ended", False))
            state.last_time = entry.get("last_time")
            self._files[path] = state


def _entries(directory: str) -> list[str]:
    """The names in `directory` (none if it cannot be listed: gone, or not a directory)."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _is_run_file(path: str) -> bool:
    """Whether `find_run_files` lists `path`, named like a run file where one belongs: anything but a directory."""
    return os.path.lexists(path) and not os.path.isdir(path)


def _add_run_files(run_dir: str, found: set[str]) -> None:
    """Add to `found` the run files in the run directory `run_dir`."""
    for name in _entries(run_dir):
        if _RUN_NAME(name):
            path = os.path.join(run_dir, name)
            if not os.path.isdir(path):
                found.add(path)


def _run_id(path: str) -> str:
    match = _RUN_FILE.match(os.path.basename(path))
    return match.group(1) if match else os.path.basename(path)


def _run_label(run: RunInfo) -> str:
    if run.entity and run.project and run.run_id:
        return f"{run.entity}/{run.project}/{run.run_id}"
    return run.run_id
