"""File-system notifications for the file sources: one inotify instance, every watched tree.

A source names the directories it reads (`watch_dirs`): a tree (every directory under it, those
created later too) or a single directory. The watcher adds an inotify watch on each directory and
reports, per source, the paths that changed: a file written, created, deleted or renamed; a
directory created (already watched when it is reported, so nothing written into it is missed: the
source lists it). A root that does not exist yet, or that was deleted, is waited for by watching its
nearest existing ancestor; when it appears it is watched and reported. A lost event queue
(`IN_Q_OVERFLOW`) reports `None`: look at everything.

Events are drained in batches: a batch becomes one report per source, whatever the number of writes
it holds (the kernel already merges identical unread events, so a writer flushing 1,000 times a
second while a read runs leaves one event, not 1,000).

Where notifications cannot arrive (a network or FUSE file system: changes made on another machine
are never reported) or cannot be had (no inotify, its limits reached), the caller polls instead:
`notifications_arrive` says which from /proc/self/mountinfo, and `Unavailable` says why not.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

log = logging.getLogger("alertd.watch")

try:
    from asyncinotify import Event, Inotify, Mask, Watch
except (ImportError, OSError, AttributeError):  # not Linux, or no usable libc: polling only
    Inotify = None  # type: ignore[assignment,misc]

POLL_ONLY_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "afs"}
    | {"davfs", "vboxsf", "virtiofs", "ncpfs", "coda", "pvfs2", "orangefs", "ocfs2", "gfs2"}
)
"""File systems whose files other machines change: their writes never reach this machine's inotify."""

Report = Callable[[str, frozenset[str] | None], None]
"""Called with (source name, the paths that changed), or None for "look at everything"."""


@dataclass(frozen=True, slots=True)
class WatchDir:
    """A directory a source reads: with every directory under it (`tree`), or alone."""

    path: str
    tree: bool


class Unavailable(Exception):
    """Notifications cannot be had here (the message says why); the source polls instead."""


def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system holding `path` (or its nearest existing ancestor), None if unknown."""
    real = os.path.realpath(_existing(path))
    best, kind = "", None
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                point = _unescape(fields[4])
                after = line.split(" - ", 1)[1].split()
                if not after:
                    continue
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, after[0]
    except OSError:
        return None
    return kind


def notifications_arrive(path: str) -> tuple[bool, str]:
    """Whether inotify sees the writes to files under `path`, and the file system's type."""
    kind = fs_type(path) or "unknown"
    local = kind not in POLL_ONLY_FS and not kind.startswith("fuse")
    return local, kind


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are written as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _existing(path: str) -> str:
    """`path`, or its nearest ancestor that exists (as an absolute path)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


if Inotify is not None:
    MASK = (
        Mask.MODIFY
        | Mask.ATTRIB
        | Mask.CREATE
        | Mask.DELETE
        | Mask.MOVED_FROM
        | Mask.MOVED_TO
        | Mask.DELETE_SELF
        | Mask.MOVE_SELF
        | Mask.ONLYDIR
        | Mask.EXCL_UNLINK
    )
    _NEW = Mask.CREATE | Mask.MOVED_TO
    _GONE = Mask.DELETE | Mask.MOVED_FROM
    _SELF = Mask.IGNORED | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.UNMOUNT


class FsWatcher:
    """One inotify instance for every source that reads local files. See the module docstring.

    `add` and `remove` may run in a worker thread (a tree of 10,000 directories takes a while to
    watch); `run` reads the events on the event loop and calls `report` from there.
    """

    def __init__(self, report: Report, *, batch: int = 512) -> None:
        if Inotify is None:
            raise Unavailable("inotify is not available on this system")
        try:
            self._ino = Inotify(cache_size=batch)
        except OSError as exc:
            limit = " (fs.inotify.max_user_instances reached)" if exc.errno == errno.EMFILE else ""
            raise Unavailable(f"inotify cannot be started: {exc.strerror or exc}{limit}") from None
        self._ino.sync_timeout = 0  # sync_get() drains what is there and never waits
        self._report = report
        self._roots: dict[str, list[WatchDir]] = {}
        self._waiting: dict[str, list[WatchDir]] = {}
        """Roots not there yet, per source: their nearest existing ancestor is watched instead."""
        self._watches: dict[str, Watch] = {}
        self._paths: dict[int, str] = {}
        self._closed = False
        self._lock = threading.Lock()
        """Held by `add`/`remove` (maybe in a worker thread) and by the handling of a batch of events."""

    @property
    def watched(self) -> int:
        """How many directories are watched now."""
        return len(self._watches)

    def add(self, owner: str, dirs: Iterable[WatchDir]) -> None:
        """Watch `dirs` for the source `owner` (raises `Unavailable`, with nothing left watched for it)."""
        with self._lock:
            self._roots[owner] = list(dirs)
            self._waiting[owner] = []
            try:
                for root in self._roots[owner]:
                    self._arm(owner, root)
            except Unavailable:
                self._remove(owner)
                raise

    def remove(self, owner: str) -> None:
        """Stop watching for `owner` (directories another source reads stay watched)."""
        with self._lock:
            self._remove(owner)

    def _remove(self, owner: str) -> None:
        self._roots.pop(owner, None)
        self._waiting.pop(owner, None)
        for path in list(self._watches):
            if not self._wanted(path):
                self._unwatch(path)

    def close(self) -> None:
        """Release the inotify instance."""
        if not self._closed:
            self._closed = True
            self._ino.close()

    async def run(self) -> None:
        """Read events until cancelled; each batch becomes one report per source."""
        while True:
            first = await self._ino.get()
            changes: dict[str, set[str] | None] = {}
            if not self._lock.acquire(blocking=False):  # `add` is watching a large tree: wait off the loop
                await asyncio.to_thread(self._lock.acquire)
            try:
                for event in self._drain(first):
                    self._handle(event, changes)
            finally:
                self._lock.release()
            for owner, paths in changes.items():
                if owner in self._roots:
                    self._report(owner, None if paths is None else frozenset(paths))

    def _drain(self, first: Event) -> Iterator[Event]:
        yield first
        while True:
            try:
                event = self._ino.sync_get()
            except BlockingIOError:
                return
            if event is None:
                return
            yield event

    # -- events

    def _handle(self, event: Event, changes: dict[str, set[str] | None]) -> None:
        mask = event.mask
        if Mask.Q_OVERFLOW in mask:
            log.warning("file-system events were lost (inotify queue overflow); looking at every file again")
            for owner in self._roots:
                changes[owner] = None
            return
        watch = event.watch
        if watch is None:
            return
        where = self._paths.get(watch.wd) or str(watch.path)
        if mask & _SELF:
            self._lost(where, watch, mask, changes)
            return
        path = os.path.join(where, os.fsdecode(event.name)) if event.name is not None else where
        is_dir = Mask.ISDIR in mask
        if is_dir and mask & _GONE:
            for sub in [p for p in list(self._watches) if p == path or p.startswith(path + os.sep)]:
                self._unwatch(sub)
        for owner, root in self._covering(where):
            if is_dir and mask & _NEW and root.tree:
                self._try_tree(owner, path, changes)
            _mark(changes, owner, path)
        self._retry_below(where, changes)

    def _lost(self, where: str, watch: Watch, mask: Mask, changes: dict[str, set[str] | None]) -> None:
        """A watched directory was deleted, moved away or unmounted: roots among them are waited for again."""
        if Mask.IGNORED in mask:
            if self._watches.get(where) is not watch:
                return  # the last word of an old watch: the path is watched anew already
            self._forget(where)
        elif Mask.MOVE_SELF in mask:
            self._unwatch(where)  # the watch followed the directory away; what comes to this path is another
        else:
            return  # DELETE_SELF, UNMOUNT: IGNORED follows
        for owner, roots in list(self._roots.items()):
            lost = [r for r in roots if r.path == where and r not in self._waiting[owner]]
            if lost:
                self._waiting[owner] += lost
                _mark(changes, owner, where)
                self._retry_waiting(owner, changes)
        self._retry_below(where, changes)

    def _retry_below(self, where: str, changes: dict[str, set[str] | None]) -> None:
        """Something changed in `where`: the roots waited for below it may be there now."""
        prefix = where.rstrip(os.sep) + os.sep
        for owner, waiting in list(self._waiting.items()):
            if any(r.path.startswith(prefix) for r in waiting):
                self._retry_waiting(owner, changes)

    def _retry_waiting(self, owner: str, changes: dict[str, set[str] | None]) -> None:
        waiting, self._waiting[owner] = self._waiting[owner], []
        armed = False
        for root in waiting:
            try:
                if self._arm(owner, root):
                    armed = True
                    _mark(changes, owner, root.path)
            except Unavailable as exc:
                log.warning("source %s: %s; it is read at its rescans only", owner, exc)
        if armed:  # the ancestors watched while waiting are not needed any more
            for path in [p for p in list(self._watches) if not self._wanted(p)]:
                self._unwatch(path)

    def _try_tree(self, owner: str, path: str, changes: dict[str, set[str] | None]) -> None:
        try:
            self._tree(path)
        except Unavailable as exc:
            log.warning("source %s: %s; it is read at its rescans only", owner, exc)
            changes[owner] = None

    def _covering(self, where: str) -> list[tuple[str, WatchDir]]:
        """The (source, root) pairs that read the directory `where`."""
        out = []
        for owner, roots in self._roots.items():
            waiting = self._waiting.get(owner, ())
            for root in roots:
                if root in waiting:
                    continue
                if where == root.path or (root.tree and where.startswith(root.path.rstrip(os.sep) + os.sep)):
                    out.append((owner, root))
                    break
        return out

    # -- watches

    def _arm(self, owner: str, root: WatchDir) -> bool:
        """Watch `root` (True), or its nearest existing ancestor until it appears (False)."""
        if os.path.isdir(root.path):
            if root.tree:
                self._tree(root.path)
            else:
                self._watch(root.path)
            return True
        self._waiting[owner].append(root)
        ancestor = _existing(root.path)
        if ancestor not in self._watches:
            self._watch(ancestor)
        return False

    def _tree(self, top: str) -> None:
        """Watch `top` and every directory under it (symbolic links to directories too, each once)."""
        seen: set[tuple[int, int]] = set()
        stack = [top]
        while stack:
            path = stack.pop()
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            if path not in self._watches and not self._watch(path):
                continue
            try:
                with os.scandir(path) as it:
                    for entry in it:
                        try:
                            if entry.is_dir():
                                stack.append(entry.path)
                        except OSError:
                            continue
            except OSError:
                continue

    def _watch(self, path: str) -> bool:
        """Add one watch; False if the directory went away meanwhile or cannot be read."""
        try:
            watch = self._ino.add_watch(path, MASK)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise Unavailable(
                    f"the inotify watch limit is reached ({_limit('max_user_watches')} directories, "
                    "sysctl fs.inotify.max_user_watches)"
                ) from None
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP):
                return False
            raise Unavailable(f"cannot watch {path}: {exc.strerror or exc}") from None
        self._watches[path] = watch
        self._paths[watch.wd] = path
        return True

    def _unwatch(self, path: str) -> None:
        watch = self._forget(path)
        if watch is not None:
            with contextlib.suppress(OSError):  # already gone with its directory
                self._ino.rm_watch(watch)

    def _forget(self, path: str) -> Watch | None:
        watch = self._watches.pop(path, None)
        if watch is not None and self._paths.get(watch.wd) == path:
            del self._paths[watch.wd]
        return watch

    def _wanted(self, path: str) -> bool:
        if self._covering(path):
            return True
        return any(_existing(r.path) == path for roots in self._waiting.values() for r in roots)


def _mark(changes: dict[str, set[str] | None], owner: str, path: str) -> None:
    if owner in changes and changes[owner] is None:
        return
    changes.setdefault(owner, set()).add(path)  # type: ignore[union-attr]


def _limit(name: str) -> str:
    try:
        with open(f"/proc/sys/fs/inotify/{name}", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "?"
