"""The checkpoint ledger: every save a trainer callback saw, and whether its weights were finite; framework-free.

One JSON line per save, appended to `<output_dir>/alertd-checkpoints.jsonl` (HF: `args.output_dir`; Lightning:
`default_root_dir`), by the process of global rank 0 only:

    {"step":40,"path":"/out/checkpoint-40","time":1717000000.5,"finite":false,"saved":false,"by":"schedule","framework":"hf"}

- `step`: the trainer's global step; `path`: the checkpoint's absolute path (the one the framework was about to
  write, when it was vetoed); `time`: Unix seconds;
- `finite`: every floating tensor of the model's parameters and of the optimizer's state was finite (on every
  rank); `saved`: the checkpoint was written (false: vetoed, because the weights were not finite);
- `by`: "schedule" (the framework's own saving: HF `save_strategy`, Lightning `ModelCheckpoint`), "stop"
  (alertd's stop request) or "command" (alertd's `save` command);
- `framework`: "hf" or "lightning".

`last_good(output_dir)` gives the newest entry whose weights were finite, that was saved, and whose path still
exists (rotation deletes the old ones): the checkpoint to roll back to. Reads are bounded: only the last
`MAX_READ_BYTES` of the file are read.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

log = logging.getLogger("alertd.integrations")

LEDGER_NAME = "alertd-checkpoints.jsonl"
MAX_READ_BYTES = 1 << 20
"""How much of the ledger's end is read (1 MiB: several thousand entries)."""
SCHEDULE = "schedule"
STOP = "stop"
COMMAND = "command"


def ledger_path(output_dir: str | os.PathLike[str]) -> str:
    """The ledger's file in an output directory."""
    return os.path.join(os.fspath(output_dir), LEDGER_NAME)


def read(output_dir: str | os.PathLike[str], max_bytes: int = MAX_READ_BYTES) -> list[dict[str, Any]]:
    """The ledger's entries, oldest first: the complete, well-formed lines of its last `max_bytes` bytes; [] when
    there is no ledger."""
    try:
        with open(ledger_path(output_dir), "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return []
    except OSError as e:
        log.warning("alertd: can't read the checkpoint ledger in %s: %s", output_dir, e)
        return []
    if start > 0:  # the first line is cut: drop it
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    entries = []
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line being written, or garbage
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def is_good(entry: dict[str, Any]) -> bool:
    """The entry is a saved checkpoint with finite weights whose path still exists."""
    path = entry.get("path")
    return entry.get("finite") is True and entry.get("saved") is True and isinstance(path, str) and os.path.exists(path)


def last_good(output_dir: str | os.PathLike[str], max_bytes: int = MAX_READ_BYTES) -> dict[str, Any] | None:
    """The newest entry of the ledger with finite weights, saved, whose path still exists; None if there is none."""
    for entry in reversed(read(output_dir, max_bytes)):
        if is_good(entry):
            return dict(entry)
    return None


class Ledger:
    """One training run's view of the ledger: it records saves and vetoes, and knows the last good checkpoint.

    Every process of a distributed run keeps one (all see the same saves and vetoes); only the one with `write`
    (global rank 0) appends to the file. A veto is recorded once per (step, path, by), and logged at WARNING the
    first time a scheduled save is vetoed in the run (later ones at INFO: the weights stay NaN).
    """

    def __init__(self, output_dir: str | os.PathLike[str], framework: str, write: bool) -> None:
        self.output_dir = os.path.abspath(os.fspath(output_dir))
        self.path = ledger_path(self.output_dir)
        self.framework = framework
        self.write = write
        self._last_good: str | None = None
        self._vetoed: set[tuple[str, str]] = set()
        self._veto_step: int | None = None
        self._warned = False
        self._failed = False

    def saved(self, step: int, path: str, by: str) -> None:
        """A checkpoint with finite weights was written to `path`."""
        path = os.path.abspath(path)
        self._last_good = path
        self._record(step, path, finite=True, saved=True, by=by)

    def vetoed(self, step: int, path: str, by: str) -> bool:
        """A save to `path` was skipped because the weights were not finite; False if already recorded."""
        path = os.path.abspath(path)
        if step != self._veto_step:  # only this step's vetoes can come again (several save hooks at one step)
            self._vetoed.clear()
            self._veto_step = step
        if (path, by) in self._vetoed:
            return False
        self._vetoed.add((path, by))
        self._record(step, path, finite=False, saved=False, by=by)
        if by == SCHEDULE and self.write:
            last = self.last_good()
            level = logging.INFO if self._warned else logging.WARNING
            self._warned = True
            log.log(
                level,
                "alertd: step %d: weights not finite, %s not saved; %s",
                step,
                os.path.basename(path),
                f"the last good checkpoint is {last}" if last else "no good checkpoint is known",
            )
        return True

    def last_good(self) -> str | None:
        """The path of the newest checkpoint with finite weights that still exists (this run's, else the ledger's)."""
        if self._last_good and os.path.exists(self._last_good):
            return self._last_good
        entry = last_good(self.output_dir)
        return str(entry["path"]) if entry else None

    def _record(self, step: int, path: str, *, finite: bool, saved: bool, by: str) -> None:
        if not self.write or self._failed:
            return
        entry = {
            "step": step,
            "path": path,
            "time": round(time.time(), 6),
            "finite": finite,
            "saved": saved,
            "by": by,
            "framework": self.framework,
        }
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            os.makedirs(self.output_dir, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError as e:
            self._failed = True
            log.error("alertd: can't write the checkpoint ledger %s (%s): no more saves are recorded", self.path, e)
