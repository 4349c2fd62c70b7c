"""The source runner: each source polled at its interval by an APScheduler job, file sources woken by file-system
notifications, every poll bounded in time, its health kept, its samples handed over in slices.

A source that fails is retried with backoff, logged when its state changes, and visible as the series
`alertd.source.up` (1 or 0); a poll that does not return within POLL_TIMEOUT counts as failed while it hangs
(its thread is left to it). A poll's samples are ingested in slices of about INGEST_SLICE seconds, the event
loop free between them, so one source's storm never holds the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from alertd.buffer import SeriesBuffer
from alertd.clock import Clock
from alertd.config import Config
from alertd.health import SourceHealth
from alertd.model import Sample, SeriesKey, make_labels
from alertd.service.engine import log
from alertd.service.state import StateKeeper, config_fp
from alertd.sources.base import Cuts, ReadsChanges, Source
from alertd.sources.config import FileSourceConfig, SourceConfig
from alertd.sources.registry import build_source, watch_dirs
from alertd.sources.watch import FsWatcher, Unavailable, notifications_arrive

SOURCE_UP = "alertd.source.up"
POLL_TIMEOUT = 10.0
"""Seconds beyond its interval a source's poll may take before it counts as failed (it keeps its thread)."""
WAKE_GAP = 0.005
"""Seconds between the starts of two reads of one source woken by file-system notifications: a writer
flushing continuously costs at most 1/WAKE_GAP reads a second, whatever its rate; the first write after a
quiet moment is read at once."""
INGEST_SLICE = 0.1
"""Seconds of the event loop one slice of a poll's samples takes, about (appended, tracked, evaluated and
planned): after each slice the loop is left as long to everything else (the API, the deliveries, the other
sources' samples), so one source's storm (tens of thousands of series at once) never holds the others for
seconds; a poll of up to INGEST_FIRST samples is one slice, as before."""
INGEST_FIRST = 1000
"""Samples in a poll's first slice; the next slices grow or shrink to take about INGEST_SLICE each."""
INGEST_MIN, INGEST_MAX = 1000, 1_000_000

Ingest = Callable[[list[Sample], float], None]
BeforeIngest = Callable[[Source, float], Awaitable[None]]


class SourceRunner:
    """The sources of the configuration in force, polled, watched and woken; their health.

    `ingest(samples, now)` takes a slice of a poll's samples; `before_ingest(source, now)` runs before a poll's
    samples are taken (the writer checks of a TensorBoard source); `state` keeps the cursors; `buffer()` the
    buffer whose series limits a poll may meet.
    """

    def __init__(
        self,
        clock: Clock,
        config: Callable[[], Config],
        buffer: Callable[[], SeriesBuffer],
        state: Callable[[], StateKeeper],
        ingest: Ingest,
        before_ingest: BeforeIngest,
    ) -> None:
        self.clock = clock
        self._config = config
        self._buffer = buffer
        self._state = state
        self._ingest = ingest
        self._before_ingest = before_ingest
        self.sources: dict[str, Source] = {}
        self.health: dict[str, SourceHealth] = {}
        self.scheduler: AsyncIOScheduler | None = None
        self.watcher: FsWatcher | None = None
        self.watching: dict[str, str] = {}
        """How each file source learns of changes: "notify", or why it polls."""
        self._polls: dict[str, tuple[float, asyncio.Task[list[Sample]]]] = {}
        self._changed: dict[str, frozenset[str] | None] = {}
        """Per source, what notifications reported since its last read began (None: everything)."""
        self._waking: set[str] = set()
        self._last_wake: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher_error = ""
        """Why file-system notifications cannot be had at all (empty: they can)."""

    def busy(self, name: str) -> bool:
        """Whether a poll of source `name` runs."""
        return name in self._polls

    def build(self, configs: list[SourceConfig] | tuple[SourceConfig, ...]) -> None:
        """The sources of a configuration (not yet scheduled)."""
        self.sources = {s.name: build_source(s) for s in configs}
        self.health = {name: SourceHealth(name, src.interval) for name, src in self.sources.items()}

    def read_once(self) -> bool:
        """Whether every source has been polled and its samples taken, with no file left half read (the start-up
        read is over)."""
        if any(h.polls == 0 or h.busy for h in self.health.values()):
            return False
        return not any(getattr(source, "behind", False) for source in self.sources.values())

    def start(self, scheduler: AsyncIOScheduler) -> None:
        """Watch and schedule every source on `scheduler`."""
        self.scheduler = scheduler
        try:
            self.watcher = FsWatcher(self._on_change)
        except Unavailable as exc:
            self._watcher_error = str(exc)
        for name in self.sources:
            self._schedule(name)
        if self.watcher is not None:
            self._spawn(self._watch_events(), "watcher")

    def reconfigure(self, old: Config, new: Config, close: Callable[[Source], None]) -> None:
        """Drop the sources a reload changed or removed (`close` them), build and schedule the new ones."""
        for cfg in old.sources:
            if config_fp(new, cfg.name) != config_fp(old, cfg.name):
                self._drop(cfg.name, close)
        for cfg in new.sources:
            if cfg.name not in self.sources:
                self.sources[cfg.name] = build_source(cfg)
                self.health[cfg.name] = SourceHealth(cfg.name, cfg.interval)
                self._schedule(cfg.name)

    async def stop(self) -> None:
        """Stop watching and waking (scheduled polls stop with the scheduler); close every source."""
        for task in list(self._tasks):
            task.cancel()
        if self.watcher is not None:
            self.watcher.close()
        for source in self.sources.values():
            await quietly(source.aclose())

    # scheduling and watching

    def _drop(self, name: str, close: Callable[[Source], None]) -> None:
        source = self.sources.pop(name, None)
        self.health.pop(name, None)
        if self.scheduler is not None and self.scheduler.get_job(f"source:{name}"):
            self.scheduler.remove_job(f"source:{name}")
        self._changed.pop(name, None)
        self.watching.pop(name, None)
        if self.watcher is not None:
            self.watcher.remove(name)
        if source is not None:
            close(source)

    def _schedule(self, name: str) -> None:
        """Poll the source at its interval from now; a file source that can be notified is then watched,
        and polled only at its `rescan` interval (the safety net)."""
        if self.scheduler is None:
            return
        self.scheduler.add_job(
            self._scheduled_poll,
            "interval",
            args=[name],
            seconds=self.sources[name].interval,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id=f"source:{name}",
            next_run_time=datetime.now(UTC),
        )
        self._spawn(self._watch(name), f"watch:{name}")

    async def _watch(self, name: str) -> None:
        cfg = next((s for s in self._config().sources if s.name == name), None)
        source = self.sources.get(name)
        if not isinstance(cfg, FileSourceConfig) or source is None:
            return
        mode = cfg.watch
        dirs = watch_dirs(cfg, source)
        why, warn = "", mode == "notify"
        if mode == "poll":
            why = "watch: poll"
        elif not dirs:
            why = "nothing local to watch"
        elif self.watcher is None:
            why, warn = self._watcher_error, True
        elif mode == "auto":
            local, kind = await asyncio.to_thread(notifications_arrive, dirs[0].path)
            if not local:
                why = f"{kind} file system: changes made elsewhere are not notified"
        if not why:
            assert self.watcher is not None
            try:
                await asyncio.to_thread(self.watcher.add, name, dirs)
            except Unavailable as exc:
                why, warn = str(exc), True
        if name not in self.sources or self.sources[name] is not source:
            if not why and self.watcher is not None:
                self.watcher.remove(name)
            return
        if why:
            self.watching[name] = f"poll ({why})"
            log.log(
                logging.WARNING if warn else logging.INFO,
                "source %s: polling every %gs (%s)",
                name,
                source.interval,
                why,
                extra={"source": name},
            )
            return
        self.watching[name] = "notify"
        if self.scheduler is not None and self.scheduler.get_job(f"source:{name}"):
            self.scheduler.reschedule_job(f"source:{name}", trigger="interval", seconds=cfg.rescan)
        self._on_change(name, None)  # what changed while the watches were being set up
        log.info(
            "source %s: reading on file-system notifications (%d directories watched), a full rescan every %gs",
            name,
            self.watcher.watched if self.watcher else 0,
            cfg.rescan,
            extra={"source": name},
        )

    async def _watch_events(self) -> None:
        assert self.watcher is not None
        try:
            await self.watcher.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # the sources still poll at their rescan interval; say so, loudly
            log.exception("file-system notifications failed; the watched sources are read at their rescans only")

    def _on_change(self, name: str, paths: frozenset[str] | None) -> None:
        """Notifications for source `name`: remember what changed, and read it now (or when the read under
        way ends)."""
        if name not in self.sources:
            return
        if paths is None or (name in self._changed and self._changed[name] is None):
            self._changed[name] = None
        else:
            self._changed[name] = (self._changed.get(name) or frozenset()) | paths
        self._wake(name)

    def _wake(self, name: str) -> None:
        health = self.health.get(name)
        if health is None or name in self._waking or name in self._polls or health.busy:
            return  # a read is on its way or under way; it looks at `_changed` again when it ends
        loop = asyncio.get_running_loop()
        self._waking.add(name)
        delay = max(
            self._last_wake.get(name, float("-inf")) + WAKE_GAP - loop.time(), health.retry_at - self.clock.now()
        )
        if delay > 0:
            loop.call_later(delay, self._start_wake, name)
        else:
            self._start_wake(name)

    def _start_wake(self, name: str) -> None:
        self._spawn(self._woken(name), f"wake:{name}")

    async def _woken(self, name: str) -> None:
        self._waking.discard(name)
        if name in self.sources and name in self._changed:
            self._last_wake[name] = asyncio.get_running_loop().time()
            try:
                await self.poll(name, woken=True)
            except Exception:  # as a scheduled poll's would be: logged, and the service goes on
                log.exception("reading source %s after a notification", name)

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        """Run `coro` as a task held until it ends (`stop` cancels it)."""
        task = asyncio.get_running_loop().create_task(coro, name=what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # polling

    async def _scheduled_poll(self, name: str) -> None:
        """A poll the scheduler started: one still under way when alertd stops (its loop cancels what is left)
        ends quietly, not as a job's traceback."""
        with contextlib.suppress(asyncio.CancelledError):
            await self.poll(name)

    async def poll(self, name: str, *, woken: bool = False) -> None:
        """One poll of one source, with backoff after failures: scheduled (everything the source reads),
        or `woken` by notifications (only what they reported, where the source can read just that).

        The poll runs as a task of its own: one that has not returned POLL_TIMEOUT after its interval
        counts as a failure (`alertd.source.up` 0, `source_failing`) and is waited for, not started
        again, at the next polls; its samples are taken when it returns. A source `behind` after it (a backlog
        longer than one poll reads: `linetail.MAX_POLL`, TensorBoard's `_MAX_POLL_READ`) is read on at once.
        """
        source, health, state = self.sources[name], self.health[name], self._state()
        now = self.clock.now()
        if not health.due(now):
            return
        started, task = self._polls.get(name) or (now, None)
        if task is None:
            changed = self._changed.pop(name, None)
            paths = changed if woken else None
            state.before_read(name, source, self._config())
            task = asyncio.get_running_loop().create_task(_read(source, now, paths), name=f"poll:{name}")
            self._polls[name] = (now, task)
            health.polls += 1
        health.busy = True  # until its samples are ingested: the next read of it waits for that
        try:
            try:
                limit = source.interval + POLL_TIMEOUT
                done, _ = await asyncio.wait({task}, timeout=max(0.0, started + limit - self.clock.now()))
                if not done:
                    raise TimeoutError(f"a poll has not returned within {limit:g}s; waiting for it")
                del self._polls[name]
                samples = task.result()
            except Exception as exc:  # A source never crashes the service.
                health.failed(exc, now)
                samples = []
            else:
                health.succeeded(samples, now)
                state.read_done(name)
            try:
                if name not in self.sources:  # dropped by a reload meanwhile
                    return
                await self._before_ingest(source, now)
                await self._take(name, source, samples, now)
            finally:
                state.ingested(name, bool(samples))  # (done before the last slice, unless a slice failed)
        finally:
            health.busy = False
        if getattr(source, "behind", False) and self.sources.get(name) is source:
            self._changed[name] = None  # a backlog longer than one poll reads: the rest now, not at the next poll
        if name in self._changed:
            self._wake(name)

    async def _take(self, name: str, source: Source, samples: list[Sample], now: float) -> None:
        """A poll's samples, with the source's `alertd.source.up`, ingested in slices of about INGEST_SLICE
        seconds (the loop is free between them); then what the poll left out at the source's limits (its own,
        `take_cuts`, and the buffer's series limit) goes to its health."""
        health, buffer = self.health[name], self._buffer()
        cuts: list[str] = list(source.take_cuts()) if isinstance(source, Cuts) else []
        if health.failures:  # a failed poll's are not this data's
            cuts = []
        dropped = buffer.dropped[name]
        done, size = 0, INGEST_FIRST
        while len(samples) - done > size:
            begun = time.perf_counter()
            self._ingest(samples[done : done + size], now)
            done += size
            took = time.perf_counter() - begun
            size = max(INGEST_MIN, min(INGEST_MAX, int(size * min(2.0, max(0.25, INGEST_SLICE / max(took, 1e-6))))))
            await asyncio.sleep(min(took, INGEST_SLICE))  # as long again for the rest: an HTTP exchange, a wake-up
            if self.sources.get(name) is not source:  # dropped by a reload meanwhile: the rest is not its
                return
            now = max(now, self.clock.now())  # the later slices are taken later
        over = health.failures or cuts or buffer.dropped[name] > dropped or health.cut is not None
        up = Sample(SeriesKey(SOURCE_UP, make_labels({"source": name})), now, None, 0.0 if over else 1.0)
        self._state().ingested(name, bool(samples))  # the commit of what the last slice makes takes the cursor
        self._ingest([*samples[done:], up], now)
        if health.failures:
            return
        lost = buffer.dropped[name] - dropped
        if lost:
            limit = buffer.limits.series_limit(name)
            cuts.append(
                f"{lost} samples of new series dropped at the series limit ({limit} series for this source: its "
                f"max_series, or buffer.max_series_per_source; {buffer.limits.max_series} in all: buffer.max_series)"
            )
        health.limited(cuts, bool(samples))


async def _read(source: Source, now: float, paths: frozenset[str] | None = None) -> list[Sample]:
    if paths is not None and isinstance(source, ReadsChanges):
        return list(await source.poll_changed(now, paths))
    return list(await source.poll(now))


async def quietly(coro: Awaitable[object]) -> None:
    """Await `coro`; what it raises is logged, never raised (closing a source or a notifier)."""
    try:
        await coro
    except Exception as exc:
        log.warning("while closing: %s", exc)
