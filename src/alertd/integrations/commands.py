"""The command channel from alertd to a training loop: files in a per-run commands directory; framework-free.

alertd's in-process actions (`lr_scale`, `skip_step`, `save`, `stop`) write one command file each into the run's
commands directory (`<output_dir>/alertd-commands` by default; `$ALERTD_COMMANDS_DIR`), atomically: a hidden
temporary file, renamed to `<time_ns>-<notifier>-<action>.cmd`, so the trainer never reads half a command and
reads them in the order they were made. The body is a small JSON object: `action`, its parameters (`factor`,
`min_lr`), and why (`notifier`, `rule`, `labels`, `step`).

The trainer side (`Inbox`) looks at the directory at every step boundary with one `os.stat` (its mtime), and
lists it only when that changed (or changed less than `RECENT_NS` ago: a rename within the same clock tick
leaves the mtime as it was). A command is taken only when it is a regular file (not a link) owned by the
trainer's own user or root; any other is refused. Each command, applied or refused, gets an acknowledgement
next to it, `<name>.ack` (JSON: `step`, `action`, `applied`, `old_lr`, `new_lr`, `refused`; written atomically),
and is then renamed to `<name>.done`, so a run resumed in the same directory never applies it again. alertd's
notifier waits for the `.ack` and reports it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("alertd.integrations")

COMMANDS_DIR_ENV = "ALERTD_COMMANDS_DIR"
DEFAULT_COMMANDS_NAME = "alertd-commands"
ACTIONS = ("lr_scale", "skip_step", "save", "stop")
SUFFIX, ACK, DONE = ".cmd", ".ack", ".done"
MAX_BYTES = 65536
RECENT_NS = 2_000_000_000
"""A directory changed this recently is listed at every look (its mtime may not move for a second rename)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


@dataclass(frozen=True, slots=True)
class Command:
    """One command file: its name (without `.cmd`), its action and the body's other keys."""

    name: str
    action: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def number(self, key: str, default: float) -> float:
        """A numeric parameter of the body, else `default`."""
        value = self.body.get(key, default)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def command_name(notifier: str, action: str, now_ns: int | None = None) -> str:
    """The file name (without `.cmd`) of a new command: ordered by time, naming who made it and what it asks."""
    return f"{now_ns if now_ns is not None else time.time_ns():020d}-{_UNSAFE.sub('_', notifier)}-{action}"


def write_atomic(path: str, body: Mapping[str, Any]) -> None:
    """Write `body` as JSON to `path`: a temporary file in the same directory, fsynced, renamed over it (OSError
    on failure, nothing left behind)."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=directory or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(dict(body), allow_nan=False) + "\n")
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def send(directory: str, notifier: str, action: str, body: Mapping[str, Any]) -> str:
    """Create a command in `directory` (which must exist); its name (the `.ack` is `<dir>/<name>.ack`)."""
    name = command_name(notifier, action)
    write_atomic(os.path.join(directory, name + SUFFIX), {**body, "action": action, "notifier": notifier})
    return name


def read_json(path: str, uid: int | None = None) -> dict[str, Any] | str:
    """The JSON object in a regular file (not followed through a link, at most `MAX_BYTES`), owned by `uid` or root
    when given; else why not, in words."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return f"can't open {os.path.basename(path)}: {e.strerror}"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return f"{os.path.basename(path)} is not a regular file"
        if uid is not None and info.st_uid not in (uid, 0):
            return f"{os.path.basename(path)} is owned by uid {info.st_uid}, not this run's user ({uid}) or root"
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return f"{os.path.basename(path)} is larger than {MAX_BYTES} bytes"
    try:
        body = json.loads(data)
    except ValueError:
        return f"{os.path.basename(path)} is not JSON"
    return body if isinstance(body, dict) else f"{os.path.basename(path)} is not a JSON object"


def count(directory: str, notifier: str, action: str) -> int:
    """How many commands of `notifier` and `action` the directory holds (pending or done): `at_most` counts these."""
    tail = f"-{_UNSAFE.sub('_', notifier)}-{action}"
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    return sum(1 for n in names if n.endswith((tail + SUFFIX, tail + SUFFIX + DONE)) and not n.startswith("."))


class Inbox:
    """The trainer's side of one commands directory: `poll()` the new commands, `acknowledge()` each one."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.uid = os.geteuid()
        self._seen_ns: int | None = None
        self._stuck: set[str] = set()
        """Commands acknowledged that could not be renamed to `.done`: never taken again in this process."""

    def prepare(self) -> None:
        """Create the directory (alertd's notifier never creates it), readable by alertd; a failure is logged."""
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            log.warning("alertd: can't create the commands directory %s: %s", self.directory, e)

    def poll(self) -> list[Command | tuple[str, str]]:
        """The commands waiting, oldest first: a `Command`, or (name, why refused) for a file that can't be taken.
        One `os.stat` when nothing changed."""
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return []
        if mtime == self._seen_ns and time.time_ns() - mtime > RECENT_NS:
            return []
        self._seen_ns = mtime
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(SUFFIX) and not n.startswith("."))
        except OSError:
            return []
        out: list[Command | tuple[str, str]] = []
        for file_name in names:
            name = file_name.removesuffix(SUFFIX)
            if name in self._stuck:
                continue
            body = read_json(os.path.join(self.directory, file_name), self.uid)
            if isinstance(body, str):
                out.append((name, body))
            elif body.get("action") not in ACTIONS:
                out.append((name, f"unknown action {str(body.get('action'))[:40]!r}"))
            else:
                out.append(Command(name, str(body["action"]), body))
        return out

    def acknowledge(self, name: str, step: int | None, action: str, **fields: Any) -> None:
        """Write `<name>.ack` (step, action, `fields`: applied, old_lr, new_lr, refused) and rename the command to
        `<name>.cmd.done`; a failure is logged, and the command is not taken again by this process."""
        base = os.path.join(self.directory, name)
        ack = {"command": name, "step": step, "action": action, "time": round(time.time(), 6), **fields}
        try:
            write_atomic(base + ACK, ack)
            os.replace(base + SUFFIX, base + SUFFIX + DONE)
        except FileNotFoundError:
            if not os.path.exists(base + SUFFIX + DONE):  # else another rank sharing the directory renamed it
                self._stuck.add(name)
                log.warning("alertd: can't acknowledge the command %s: it is gone", base + SUFFIX)
        except (OSError, ValueError) as e:
            self._stuck.add(name)
            log.warning("alertd: can't acknowledge the command %s: %s", base + SUFFIX, e)
