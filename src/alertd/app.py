"""The running service: the one place that wires concrete classes together.

Each source is polled by an APScheduler job at its own interval. A poll that brings samples appends
them to the buffer and evaluates the rules at once; a tick at the evaluation interval evaluates the
time-based conditions (`for`, `absent`, `keep_firing_for`). Transitions go to the dispatcher, which
writes what is due to the outbox, in one transaction with the alert states and the cursors of the
sources whose samples were evaluated (every evaluation that made a transition, within CURSOR_SAVE_AFTER
of a read that brought samples, and every SAVE_EVERY seconds); a delivery task sends it. A source that
fails is retried with backoff, logged when its state changes, and visible as the series `alertd.source.up`
(1 or 0); a poll that does not return within POLL_TIMEOUT counts as failed while it hangs (its thread is
left to it).
Blocking work runs on daemon threads (`alertd.threads`), so nothing a source does keeps SIGTERM from
ending the process; rules files are read and checked off the event loop on reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from alertd.buffer import SeriesBuffer
from alertd.child import ChildRun
from alertd.clock import Clock, SystemClock
from alertd.config import Config, load_config
from alertd.dispatch.announce import ActionReport, announcements
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import STATE_DIR_ENV, Outbox, StateDirError, StateDirLocked, state_dir
from alertd.dispatch.silences import SilenceStore
from alertd.errors import ConfigError
from alertd.exec_stop import with_exec_stop
from alertd.health import SourceHealth
from alertd.logs import setup_logging
from alertd.model import Alert, Sample, SeriesKey, Transition, TransitionKind, make_labels
from alertd.notify.base import Notifier
from alertd.notify.config import ACTION_TYPES, KillConfig, NotifierConfig, action_receivers, takes_reports
from alertd.notify.registry import accepts, build_notifier
from alertd.persist import Snapshot, StateStore
from alertd.procfs import Procfs
from alertd.rules.carry import Seen, carry_over, fingerprint, restored, rule_fingerprints, seen_before, unseen
from alertd.rules.evaluate import EvalState, Evaluation, PairKey, RuleSet, evaluate
from alertd.runs import RunTracker, Writer
from alertd.secretfiles import read_secret_file
from alertd.sources.base import Source
from alertd.sources.config import SourceConfig
from alertd.sources.registry import build_source, watch_dirs
from alertd.sources.tensorboard import TensorBoardSource
from alertd.sources.watch import FsWatcher, Unavailable, notifications_arrive
from alertd.threads import DaemonExecutor
from alertd.writers import WriterClaim, WriterRegistry

log = logging.getLogger("alertd")

SOURCE_UP = "alertd.source.up"
STATE_SAVED = "alertd.state.saved"
"""1 while the state directory takes every commit, 0 while it can't be written and alerting goes on from memory
(appended when it changes; the series appears with the first failure): the default rule state_not_saved."""
HOUSEKEEPING_EVERY = 10.0
"""Seconds between two evictions of old samples and prunings of old log entries."""
WRITER_CHECK_EVERY = 2.0
"""Seconds between two looks at the TensorBoard writers' processes (new files are looked at at once)."""
SAVE_EVERY = 10.0
"""Seconds between two commits of the alert states and cursors when no evaluation made a transition (one
that did is committed at once, with what it planned and the cursor of the source whose samples made it)."""
CURSOR_SAVE_AFTER = 1.0
"""Seconds after a read that brought samples and made no transition by which the next evaluation commits its
source's cursor, with the alert states those samples made: a crash reads again at most this much, and what the
saved state had evaluated of it is left out (`alertd.rules.carry.unseen`), so it plans nothing new. Longer
where writing the states takes long (thousands of series changing at once): SAVE_SHARE."""
SAVE_SHARE = 0.05
"""At most this share of the time goes to writing the alert states for the cursors' sake (CURSOR_SAVE_AFTER is
stretched to the last write's duration divided by it)."""
POLL_TIMEOUT = 10.0
"""Seconds beyond its interval a source's poll may take before it counts as failed (it keeps its thread)."""
TRANSITION_LOG = 20_000
"""Recent transitions kept in memory for the web page's alert spans (`transition_log`)."""
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
TRANSITIONS_LOGGED = 100
"""Transitions of one evaluation logged one by one; the rest of a storm is one line counting them by rule and state."""


@dataclass
class Engine:
    """The buffer, the rules and their state: everything evaluation touches."""

    config: Config
    buffer: SeriesBuffer
    ruleset: RuleSet
    state: EvalState = field(default_factory=EvalState)
    runs: RunTracker = field(default_factory=RunTracker)
    rule_errors: dict[str, str] = field(default_factory=dict)
    last_eval: float | None = None
    eval_seconds: float = 0.0
    dirty: set[PairKey] | None = None
    """The pairs whose tracks changed since the state was last committed (None: not known)."""

    def evaluate(self, now: float) -> Evaluation:
        """Evaluate at `now` and keep the new state."""
        ev = evaluate(self.ruleset, self.buffer, now, self.state, in_place=True)
        if self.dirty is not None:
            self.dirty |= ev.state.written
        self.state = ev.state
        self.rule_errors.update(ev.errors)
        self.last_eval = now
        return ev


class Service:
    """alertd running: sources -> buffer -> rules -> dispatcher -> notifiers."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        clock: Clock | None = None,
        state: Path | None = None,
        console: TextIO | None = None,
        exec_mode: bool = False,
        amend: Callable[[Config], Config] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.console = console
        self.exec_mode = exec_mode
        self.amend = amend
        """What the composition adds to the rules files' configuration, at start and at every reload (the
        exec stop: `alertd.exec_stop`)."""
        self.writer_registry = WriterRegistry()
        self.transition_log: deque[Transition] = deque(maxlen=TRANSITION_LOG)
        """The newest transitions, for the run page's alert spans (not persisted)."""
        self._claim_generations: tuple[tuple[str, int], ...] = ()
        self._writers_checked = float("-inf")
        self.clock = clock or SystemClock()
        config = self._load()
        runs = RunTracker(config.stall_after)
        self.engine = Engine(config, SeriesBuffer(config.buffer), RuleSet(config.rules), runs=runs)
        self.engine.buffer.pinned = self._alerting  # at the series limits, a series with an alert keeps its place
        self.state_dir = state or state_dir()
        self.sources: dict[str, Source] = {}
        self.health: dict[str, SourceHealth] = {}
        self.notifiers: dict[str, Notifier] = {}
        self.outbox = Outbox(self.state_dir)  # StateDirError: the state directory can't be used
        try:
            self.silences = SilenceStore(self.state_dir)
            self.store = StateStore(self.outbox.db, legacy=self.state_dir / "state.db")
        except (sqlite3.Error, OSError) as exc:
            self.outbox.close()
            raise StateDirError(f"state directory {self.state_dir}: {exc}") from None
        self._cursors: dict[str, tuple[str, Any]] = {}
        self._cursor_due: set[str] = set()
        """Sources that read something since their cursor was last taken."""
        self._ingesting: dict[str, int] = {}
        """Per source, polls that returned and whose samples are not ingested yet."""
        self._cursor_owed: set[str] = set()
        """Sources whose ingested samples their cursor taken does not cover: taken before their next read starts."""
        self._save_took = 0.0
        """Seconds the last commit of the alert states and cursors took to write them."""
        self._seen: Seen = {}
        """Per series, the last sample the restored state evaluated: what a source reads again is left out."""
        self._source_fps: dict[str, tuple[Config, str]] = {}
        """Per source, its configuration's fingerprint (and the configuration it is of)."""
        self._polls: dict[str, tuple[float, asyncio.Task[list[Sample]]]] = {}
        self.watcher: FsWatcher | None = None
        self.watching: dict[str, str] = {}
        """How each file source learns of changes: "notify", or why it polls."""
        self._changed: dict[str, frozenset[str] | None] = {}
        """Per source, what notifications reported since its last read began (None: everything)."""
        self._waking: set[str] = set()
        self._last_wake: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher_error = ""
        """Why file-system notifications cannot be had at all (empty: they can)."""
        self._writer_claims: dict[str, list[WriterClaim]] = {}
        self._reloading = False
        self._next_save = float("-inf")
        self._saved_shown: float | None = None
        """The last value of `alertd.state.saved` appended (None: none yet)."""
        self._planned: frozenset[PairKey] | None = None
        """The alerts active when the dispatcher last planned (None: plan at the next evaluation)."""
        self._alert_memo: dict[PairKey, Any] = {}
        self.exit_code = 0
        self.dispatcher: Dispatcher | None = None
        self.child: ChildRun | None = None
        self.scheduler: AsyncIOScheduler | None = None
        self.ready = False
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._closing: set[asyncio.Task[Any]] = set()

    @property
    def config(self) -> Config:
        """The rules files now in force."""
        return self.engine.config

    def _load(self) -> Config:
        """Read and check the rules files (ConfigError), with what `amend` adds."""
        config = load_config(self.paths)
        return self.amend(config) if self.amend is not None else config

    def open(self) -> None:
        """Build the sources, notifiers and dispatcher, and take up the state of the previous run."""
        config = self.config
        _log_warnings(config)
        self.sources = {s.name: build_source(s) for s in config.sources}
        self.health = {name: SourceHealth(name, src.interval) for name, src in self.sources.items()}
        self.notifiers = {name: self._notifier(name, cfg) for name, cfg in config.notifiers.items()}
        self.dispatcher = Dispatcher(
            max_retry_after=config.max_retry_after,
            route=config.route.to_route(),
            outbox=self.outbox,
            notifiers=self.notifiers,
            inhibit_rules=[r.to_rule() for r in config.inhibit_rules],
            silences=self.silences,
            immediate=action_receivers(config.notifiers),
            max_notifications=config.max_notifications_per_flush,
        )
        self._restore()
        self.save_state()  # at once: a crash in the first seconds must not read everything again

    def _restore(self) -> None:
        """Take up the alert states and source cursors saved by the previous run."""
        tracks = self.store.load_tracks(rule_fingerprints(self.engine.ruleset))
        self.engine.state = restored(tracks, self.engine.ruleset, self.engine.buffer)
        self._seen = seen_before(tracks)
        cursors = self.store.load_cursors()
        for name, source in self.sources.items():
            saved = cursors.get(name)
            restore = getattr(source, "restore", None)
            if saved and restore is not None and saved[0] == _config_fp(self.config.sources, name):
                restore(saved[1])
                self._cursors[name] = saved
        if tracks or cursors:
            log.info("state restored: %d alert states, %d source cursors", len(tracks), len(cursors))

    def save_state(self) -> None:
        """Commit the alert states and source cursors now (no plan: nothing new is due)."""
        self.outbox.commit_plan((), {}, also=self._state_writer())
        self._saved()

    def _saved(self) -> None:
        """After a commit: the state store remembers what it wrote; where the directory could not take it (the
        outbox went on in memory: `Outbox.unsaved`), the next commit that gets through writes everything."""
        if self.outbox.unsaved is None:
            self.store.committed()
        else:
            self.store.failed()

    def _state_saved(self, now: float) -> list[Sample]:
        """`alertd.state.saved` when it changes: none while all is well from the start (unless an alert restored
        from an earlier run is on it, which needs the 1 to end)."""
        value = 1.0 if self.outbox.unsaved is None and self.silences.unsaved is None else 0.0
        if self._saved_shown is None:
            active = self.engine.state.active_pairs()
            if value == 1.0 and not any(key.metric == STATE_SAVED for _, key in active):
                self._saved_shown = 1.0
        if value == self._saved_shown:
            return []
        self._saved_shown = value
        return [Sample(SeriesKey(STATE_SAVED, ()), now, None, value)]

    def _state_writer(self) -> Callable[[sqlite3.Connection], None]:
        self._next_save = self.clock.now() + SAVE_EVERY
        for name in list(self._cursor_due):  # not of a source reading now, or whose samples await their turn
            if name in self.sources and name not in self._polls and not self._ingesting.get(name):
                self._take_cursor(name, self.sources[name])
                self._cursor_due.discard(name)
            elif name not in self.sources:
                self._cursor_due.discard(name)
        cursors = {n: c for n, c in self._cursors.items() if n in self.sources}
        engine = self.engine
        dirty = frozenset(engine.dirty) if engine.dirty is not None else None
        snap = Snapshot(engine.state.tracks, rule_fingerprints(engine.ruleset), cursors, self.clock.now(), dirty)
        engine.dirty = set()  # from here on; `failed()` makes the next commit compare everything
        write = self.store.writer(snap)

        def timed(db: sqlite3.Connection) -> None:
            began = time.perf_counter()
            write(db)
            self._save_took = time.perf_counter() - began

        return timed

    def _take_cursor(self, name: str, source: Source) -> None:
        """Note how far `source` has read: at a commit, or before its next read starts, while none of its polls runs
        and all it read is ingested (its lock is free, its reading done). A source hands the same cursor while it
        has read nothing new."""
        cursor = getattr(source, "cursor", None)
        if cursor is not None:
            fp = self._source_fps.get(name)
            if fp is None or fp[0] is not self.config:
                fp = self._source_fps[name] = (self.config, _config_fp(self.config.sources, name) or "")
            self._cursors[name] = (fp[1], cursor())
        self._cursor_due.discard(name)
        self._cursor_owed.discard(name)

    def _ingested(self, name: str, samples: bool) -> None:
        """A poll's samples are in the buffer, or go there in the evaluation that follows at once: the source's
        cursor may be taken from now on, by the commit of the transitions they make (the same transaction),
        else by the next commit, at the latest before the source's next read starts (`samples`: it brought some)."""
        if self._ingesting.get(name):
            self._ingesting[name] -= 1
            self._cursor_due.add(name)
            if samples:
                self._cursor_owed.add(name)
                after = max(CURSOR_SAVE_AFTER, self._save_took / SAVE_SHARE)
                self._next_save = min(self._next_save, self.clock.now() + after)

    async def reload(self) -> list[str]:
        """Load the rules files again, off the event loop. On an error, say what is wrong and keep the running
        rules (a reload already under way refuses a second one)."""
        if self._reloading:
            return ["a reload is already under way"]
        self._reloading = True
        try:
            config = await asyncio.get_running_loop().run_in_executor(None, self._load)
        except ConfigError as exc:
            errors = [str(p) for p in exc.problems]
            log.error("reload refused, the running rules stay: %s", "; ".join(errors))
            return errors
        finally:
            self._reloading = False
        return self.apply(config)

    def apply(self, config: Config) -> list[str]:
        """Use a checked configuration (the running rules' states carried over where unchanged)."""
        old = self.engine
        ruleset = RuleSet(config.rules)
        state, kept = carry_over(old.state, old.ruleset, ruleset, old.buffer)
        old.buffer.limits = config.buffer
        old.runs.stall_after = config.stall_after
        self.engine = Engine(config, old.buffer, ruleset, state, old.runs)
        self._planned = None  # the same alerts may route, group or be fingerprinted anew: plan at once
        self._reconfigure(old.config, config)
        log.info("rules reloaded: %d rules (%d unchanged)", len(config.rules), len(kept))
        _log_warnings(config)
        return []

    def _reconfigure(self, old: Config, new: Config) -> None:
        for cfg in old.sources:
            if _config_fp(new.sources, cfg.name) != _config_fp(old.sources, cfg.name):
                self._drop_source(cfg.name)
        for cfg in new.sources:
            if cfg.name not in self.sources:
                self.sources[cfg.name] = build_source(cfg)
                self.health[cfg.name] = SourceHealth(cfg.name, cfg.interval)
                self._schedule_source(cfg.name)
        for name, ncfg in new.notifiers.items():
            if name not in self.notifiers or old.notifiers.get(name) != ncfg:
                if name in self.notifiers:
                    self._close_later(self.notifiers[name])
                self.notifiers[name] = self._notifier(name, ncfg)
        for name in set(self.notifiers) - set(new.notifiers):
            self._close_later(self.notifiers.pop(name))
        assert self.dispatcher is not None
        self.dispatcher.reconfigure(
            route=new.route.to_route(),
            inhibit_rules=[r.to_rule() for r in new.inhibit_rules],
            notifiers=self.notifiers,
            immediate=action_receivers(new.notifiers),
            max_notifications=new.max_notifications_per_flush,
        )

    def _drop_source(self, name: str) -> None:
        source = self.sources.pop(name, None)
        self.health.pop(name, None)
        if self.scheduler is not None and self.scheduler.get_job(f"source:{name}"):
            self.scheduler.remove_job(f"source:{name}")
        self._changed.pop(name, None)
        self.watching.pop(name, None)
        if self.watcher is not None:
            self.watcher.remove(name)
        if source is not None:
            self._close_later(source)

    def _close_later(self, thing: Source | Notifier) -> None:
        """Close a source or notifier that a reload replaced, without waiting for it here."""
        self._spawn(_quietly(thing.aclose()), "close", keep=self._closing)

    def _schedule_source(self, name: str) -> None:
        """Poll the source at its interval from now; a file source that can be notified is then watched,
        and polled only at its `rescan` interval (the safety net)."""
        if self.scheduler is None:
            return
        self.scheduler.add_job(
            self.poll_source,
            "interval",
            args=[name],
            seconds=self.sources[name].interval,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id=f"source:{name}",
            next_run_time=datetime.now(UTC),
        )
        self._spawn(self._watch_source(name), f"watch:{name}")

    async def _watch_source(self, name: str) -> None:
        cfg = next((s for s in self.config.sources if s.name == name), None)
        source = self.sources.get(name)
        mode = getattr(cfg, "watch", None)
        if cfg is None or source is None or mode is None:
            return
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
        rescan = float(getattr(cfg, "rescan", 60.0))
        if self.scheduler is not None and self.scheduler.get_job(f"source:{name}"):
            self.scheduler.reschedule_job(f"source:{name}", trigger="interval", seconds=rescan)
        self._on_change(name, None)  # what changed while the watches were being set up
        log.info(
            "source %s: reading on file-system notifications (%d directories watched), a full rescan every %gs",
            name,
            self.watcher.watched if self.watcher else 0,
            rescan,
            extra={"source": name},
        )

    def _on_change(self, name: str, paths: frozenset[str] | None) -> None:
        """Notifications for source `name`: remember what changed, and read it now (or when the read under
        way ends)."""
        if name not in self.sources:
            return
        if paths is None or (name in self._changed and self._changed[name] is None):
            self._changed[name] = None
        else:
            self._changed[name] = (self._changed.get(name) or frozenset()) | paths
        self._wake_source(name)

    def _wake_source(self, name: str) -> None:
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
                await self.poll_source(name, woken=True)
            except Exception:  # as a scheduled poll's would be: logged, and the service goes on
                log.exception("reading source %s after a notification", name)

    def _spawn(self, coro: Any, what: str, *, keep: set[asyncio.Task[Any]] | None = None) -> None:
        """Run `coro` as a task held in `keep` until it ends (default: the watching and wake-up tasks, which
        shutdown cancels; reloads and closings are left to finish)."""
        tasks = self._tasks if keep is None else keep
        task = asyncio.get_running_loop().create_task(coro, name=what)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _notifier(self, name: str, cfg: NotifierConfig) -> Notifier:
        kwargs: dict[str, Any] = {}
        if isinstance(cfg, KillConfig):
            if self.exec_mode and "target" not in cfg.model_fields_set:
                cfg = cfg.model_copy(update={"target": "child"})  # under exec, the trainer is the child
            kwargs |= {"writers": self.writer_registry.writer, "claims": self.writer_registry.claims}
            kwargs["child"] = self._child_identity
        elif cfg.type == "slurm":
            kwargs["writers"] = self.writer_registry.writer  # the job id from the verified writer's environment
            kwargs["claims"] = self.writer_registry.claims  # ... when the alert's data is the writer's own
            kwargs["slurm_sources"] = self._slurm_sources  # the only sources whose slurm_job_id label counts
        elif cfg.type == "log" and self.console is not None:
            kwargs["stream"] = self.console
        if cfg.type in ACTION_TYPES and accepts(cfg.type, "report"):
            kwargs["report"] = self._action_report
        return build_notifier(name, cfg, **kwargs)

    def _slurm_sources(self) -> frozenset[str]:
        return frozenset(s.name for s in self.config.sources if s.type == "slurm")

    def _child_identity(self) -> tuple[int, int] | None:
        return self.child.identity() if self.child is not None else None

    def _alerting(self, key: SeriesKey) -> bool:
        """Whether an alert is pending or firing on the series `key` (the buffer's `pinned`)."""
        active = self.engine.state.active_pairs()
        return any((rule.name, key) in active for rule in self.engine.ruleset.for_series(key))

    async def _action_report(self, report: ActionReport) -> None:
        """Tell people what an action notifier did (a kill, a W&B run stopped, ...): a notification to every
        receiver the alert routes to that takes reports (`takes_reports`: not the actions, not pagers)."""
        extra = {"rule": report.rule, "action": report.action, "notifier": report.notifier}
        pid = getattr(report, "pid", None)
        if pid is not None:
            extra["pid"] = pid
        log.warning("%s", report.summary(), extra=extra)
        assert self.dispatcher is not None
        alerts = self.engine.state.alerts(self.engine.ruleset.rules)
        alert: Alert | Transition | None = next((a for a in alerts if a.fingerprint == report.fingerprint), None)
        if alert is None:  # resolved meanwhile (the run it stopped has ended): as it was when it fired
            fired = (t for t in reversed(self.transition_log) if t.state is TransitionKind.FIRING)
            alert = next((t for t in fired if t.fingerprint == report.fingerprint), None)
        skip = [n for n, cfg in self.config.notifiers.items() if not takes_reports(cfg)]
        notes = announcements(report, alert, self.dispatcher.route, skip, self.clock.now())
        self.dispatcher.outbox.commit_plan(notes, {})
        self._wake.set()

    # -- polling and evaluation ------------------------------------------------------------------

    async def poll_source(self, name: str, *, woken: bool = False) -> None:
        """One poll of one source, with backoff after failures: scheduled (everything the source reads),
        or `woken` by notifications (only what they reported, where the source can read just that).

        The poll runs as a task of its own: one that has not returned POLL_TIMEOUT after its interval
        counts as a failure (`alertd.source.up` 0, `source_failing`) and is waited for, not started
        again, at the next polls; its samples are taken when it returns.
        """
        source, health = self.sources[name], self.health[name]
        now = self.clock.now()
        if not health.due(now):
            return
        started, task = self._polls.get(name) or (now, None)
        if task is None:
            changed = self._changed.pop(name, None)
            paths = changed if woken else None
            if name in self._cursor_owed and not self._ingesting.get(name):  # what it read so far is evaluated:
                self._take_cursor(name, source)  # a commit while it reads on keeps the cursor of that
            task = asyncio.get_running_loop().create_task(_poll(source, now, paths), name=f"poll:{name}")
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
                self._ingesting[name] = self._ingesting.get(name, 0) + 1
            try:
                if name not in self.sources:  # dropped by a reload meanwhile
                    return
                if isinstance(source, TensorBoardSource):  # before the samples: a NaN in a new file needs its writer
                    await self.check_writers(now, only_new=True)
                await self._ingest_poll(name, source, samples, now)
            finally:
                self._ingested(name, bool(samples))  # (done before the last slice, unless a slice failed)
        finally:
            health.busy = False
        if name in self._changed:
            self._wake_source(name)

    async def _ingest_poll(self, name: str, source: Source, samples: list[Sample], now: float) -> None:
        """A poll's samples, with the source's `alertd.source.up`, ingested in slices of about INGEST_SLICE
        seconds (the loop is free between them); then what the poll left out at the source's limits (its own,
        `take_cuts`, and the buffer's series limit) goes to its health."""
        health, buffer = self.health[name], self.engine.buffer
        take = getattr(source, "take_cuts", None)
        cuts: list[str] = list(take()) if take is not None else []  # a failed poll's are not this data's
        if health.failures:
            cuts = []
        dropped = buffer.dropped[name]
        done, size = 0, INGEST_FIRST
        while len(samples) - done > size:
            begun = time.perf_counter()
            self.ingest(samples[done : done + size], now)
            done += size
            took = time.perf_counter() - begun
            size = max(INGEST_MIN, min(INGEST_MAX, int(size * min(2.0, max(0.25, INGEST_SLICE / max(took, 1e-6))))))
            await asyncio.sleep(min(took, INGEST_SLICE))  # as long again for the rest: an HTTP exchange, a wake-up
            if self.sources.get(name) is not source:  # dropped by a reload meanwhile: the rest is not its
                return
            now = max(now, self.clock.now())  # the later slices are taken later
        over = health.failures or cuts or buffer.dropped[name] > dropped or health.cut is not None
        up = Sample(SeriesKey(SOURCE_UP, make_labels({"source": name})), now, None, 0.0 if over else 1.0)
        self._ingested(name, bool(samples))  # the commit of what the last slice makes takes the poll's cursor
        self.ingest([*samples[done:], up], now)
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

    def ingest(self, samples: list[Sample], now: float) -> None:
        """Append samples and what they say of their runs, evaluate at `now`, hand the transitions on."""
        samples = self.engine.buffer.fix_times(samples, now)  # unusable times: the arrival clock
        if self._seen:  # after a restart: what the saved state evaluated, read again, is not judged twice
            samples = unseen(samples, self._seen)
        derived = self.engine.runs.observe(samples, now)
        if derived:  # series of their own (or `run.finished` where no source wrote it): order kept
            samples = [*samples, *derived]
        for restart in self.engine.buffer.append(samples, now):
            log.info(
                "series %s restarted: step %d -> %d, %d samples replaced",
                restart.series,
                restart.from_step,
                restart.to_step,
                restart.dropped,
            )
        self.evaluate(now)

    def evaluate(self, now: float) -> None:
        """Evaluate the rules and submit the transitions."""
        started = self.clock.now()
        ev = self.engine.evaluate(now)
        self.engine.eval_seconds = self.clock.now() - started
        for rule, error in ev.errors.items():
            log.warning("rule %s: %s", rule, error, extra={"rule": rule})
        for t in ev.transitions[:TRANSITIONS_LOGGED]:
            _log_transition(t)
        if len(ev.transitions) > TRANSITIONS_LOGGED:
            _log_storm(ev.transitions[TRANSITIONS_LOGGED:])
        self._submit(ev.transitions, now)

    def _alerts(self) -> dict[str, Alert]:
        """The pending and firing alerts by fingerprint (each made once per change of its track: a storm's
        thousands of firing alerts cost a look-up each per evaluation, not a new alert each)."""
        alerts = self.engine.state.alerts(self.engine.ruleset.rules, self._alert_memo)
        return {a.fingerprint: a for a in alerts}

    def _submit(self, transitions: Sequence[Transition], now: float) -> None:
        """Plan and commit, with the alert states and cursors, in one transaction. Nothing is planned when
        nothing can be due: no transition, no group timer due, the same alerts active as at the last plan."""
        assert self.dispatcher is not None
        self.transition_log.extend(transitions)
        save = bool(transitions) or self.clock.now() >= self._next_save
        active = self.engine.state.active_pairs()
        idle = not transitions and active == self._planned and not self.dispatcher.due(now)
        if idle and not save:
            return
        planned = None
        try:
            if idle:
                self.outbox.commit_plan((), {}, also=self._state_writer())
            else:
                writer = self._state_writer() if save else None
                planned = self.dispatcher.submit(transitions, self._alerts(), now, also=writer)
                self._planned = active
        except sqlite3.Error as exc:
            self.store.failed()
            self.fatal(f"can't write the state directory {self.state_dir} ({exc}); alertd stops")
            return
        self._saved()
        if transitions or (planned is not None and planned.notifications):  # to deliver, or group timers moved
            self._wake.set()

    def fatal(self, message: str) -> None:
        """Stop with exit status 1 after one clear message (the state can't be kept)."""
        if not self.exit_code:
            log.critical("%s", message)
        self.exit_code = 1
        self._stop.set()

    async def tick(self) -> None:
        """The evaluation tick: writers, runs that stalled, time-based conditions and group timers."""
        await self.check_writers(self.clock.now())
        now = self.clock.now()
        stalled = self.engine.runs.tick(now)
        if stalled:
            self.engine.buffer.append(stalled, now)
        saved = self._state_saved(now)
        if saved:
            self.engine.buffer.append(saved, now)
        self.evaluate(now)

    async def check_writers(self, now: float, *, only_new: bool = False) -> None:
        """Verify the writers the TensorBoard files name (in a thread: /proc) and tell the runs what lives.

        On the tick, at most every WRITER_CHECK_EVERY seconds; after a poll (`only_new`), only when the
        poll found files not seen before, so a NaN in a new file finds its writer verified.
        """
        sources = [(name, s) for name, s in self.sources.items() if isinstance(s, TensorBoardSource)]
        generations = tuple((name, s.generation) for name, s in sources)  # files came or went
        new = generations != self._claim_generations
        if (only_new and not new) or (not new and now - self._writers_checked < WRITER_CHECK_EVERY):
            return
        claims = [c for name, s in sources for c in self._claims_of(name, s)]
        self._claim_generations, self._writers_checked = generations, now
        if not claims:
            return
        changes, unverified, statuses = await asyncio.to_thread(self._check_writers, claims, now)
        for line in changes:
            log.info("%s", line)
        derived: list[Sample] = []
        runs = self.engine.runs
        for w in self.writer_registry.writers():
            status = statuses.get((w.pid, w.start_ticks))
            writer = Writer(w.host, w.pid, True, w.alive, w.holding, status, w.how)
            derived += runs.writer(w.source, w.run, writer, now)
        by_run: dict[tuple[str, str], tuple[WriterClaim, bool]] = {}
        for c, alive in unverified:  # a run's writer lives if any of its files' named process does
            if alive or (c.source, c.run) not in by_run:
                by_run[(c.source, c.run)] = (c, alive)
        for c, alive in by_run.values():
            derived += runs.writer(c.source, c.run, Writer(c.host, c.pid, False, alive, False), now)
        if derived:
            self.engine.buffer.append(derived, now)

    def _claims_of(self, name: str, source: TensorBoardSource) -> list[WriterClaim]:
        """The writer claims of a TensorBoard source: asked while no poll of it runs (it holds its lock
        then, maybe for long), else those of its last quiet moment."""
        if name not in self._polls:
            self._writer_claims[name] = source.writer_claims()
        return self._writer_claims.get(name, [])

    def _check_writers(
        self, claims: list[WriterClaim], now: float
    ) -> tuple[list[str], list[tuple[WriterClaim, bool]], dict[tuple[int, int], int]]:
        """The registry's check; whether each unverified claim's process lives (a zombie does not: it has
        exited, only its parent has not reaped it yet); the exit status of each verified writer that is gone
        but still a zombie, by (pid, start time): how its run ended."""
        registry = self.writer_registry
        procfs = registry.procfs
        changes = registry.check(claims, now)
        writers = registry.writers()
        verified = {(w.source, w.run) for w in writers}
        unverified = []
        for c in claims:
            if (c.source, c.run) not in verified and c.host == registry.hostname:
                info = procfs.read(c.pid)
                unverified.append((c, info is not None and not info.zombie))
        statuses: dict[tuple[int, int], int] = {}
        for w in writers:
            if not w.alive and (w.pid, w.start_ticks) not in statuses:
                info = procfs.read(w.pid)
                same = info is not None and info.zombie and info.start_ticks == w.start_ticks
                if same and info is not None and info.exit_code is not None:
                    statuses[(w.pid, w.start_ticks)] = os.waitstatus_to_exitcode(info.exit_code)
        return changes, unverified, statuses

    async def _deliveries(self) -> None:
        """Deliver what the outbox holds as soon as it is due; run group timers when they expire."""
        assert self.dispatcher is not None
        while not self._stop.is_set():
            self._wake.clear()
            now = self.clock.now()
            wake = self.dispatcher.next_wakeup()
            if wake is not None and wake <= now:
                self.dispatcher.submit((), self._alerts(), now)
            try:
                await self.dispatcher.deliver_due(now)
            except Exception:  # Delivery errors are the pipeline's; this loop must survive anything.
                log.exception("delivery loop")
            wake = self.dispatcher.next_wakeup()
            timeout = None if wake is None else max(0.05, wake - self.clock.now())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until stop() is called."""
        self.open()
        scheduler = self.scheduler = AsyncIOScheduler()
        self._start_watcher()
        for name in self.sources:
            self._schedule_source(name)
        scheduler.add_job(
            self.tick,
            "interval",
            seconds=self.config.evaluation_interval,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id="tick",
        )
        scheduler.add_job(self._housekeeping, "interval", seconds=HOUSEKEEPING_EVERY, id="housekeeping")
        for name, notifier in self.notifiers.items():
            resend = getattr(notifier, "resend", None)
            if resend is not None:
                every = getattr(self.config.notifiers[name], "resend_interval", 60.0)
                scheduler.add_job(self._resend, "interval", args=[name], seconds=every, id=f"resend:{name}")
        scheduler.start()
        deliveries = asyncio.create_task(self._deliveries(), name="deliveries")
        if self.watcher is not None:
            self._spawn(self._watch_events(), "watcher")
        self.ready = True
        log.info(
            "alertd started",
            extra={"rules": len(self.config.rules), "sources": list(self.sources), "state_dir": str(self.state_dir)},
        )
        try:
            await self._stop.wait()
        finally:
            await self._shutdown(deliveries)

    def _start_watcher(self) -> None:
        try:
            self.watcher = FsWatcher(self._on_change)
        except Unavailable as exc:
            self._watcher_error = str(exc)

    async def _watch_events(self) -> None:
        assert self.watcher is not None
        try:
            await self.watcher.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # the sources still poll at their rescan interval; say so, loudly
            log.exception("file-system notifications failed; the watched sources are read at their rescans only")

    async def _housekeeping(self) -> None:
        now = self.clock.now()
        self.engine.buffer.evict_all(now)
        if self.dispatcher is not None:
            self.dispatcher.prune(now)

    async def _resend(self, name: str) -> None:
        try:
            await self.notifiers[name].resend(self.clock.now())  # type: ignore[attr-defined]
        except Exception as exc:
            log.warning("notifier %s: re-sending firing alerts failed: %s", name, exc)

    def stop(self) -> None:
        """Ask the service to stop (safe to call from a signal handler)."""
        self._stop.set()

    def reload_later(self) -> None:
        """Start a reload without waiting for it (SIGHUP)."""
        self._spawn(self.reload(), "reload", keep=self._closing)

    def earlier_run_ended(self, source: str, run: str) -> None:
        """A run of this name ran before this alertd started, and its end was not seen (alertd exec starts
        a new one): the alerts restored for it are over. Nothing when none is active."""
        labels = {("source", source), ("run", run)}
        if not any(labels <= set(key.labels) for _, key in self.engine.state.active_pairs()):
            return
        now = self.clock.now()
        derived = self.engine.runs.ended_unseen(source, run, now)
        if derived:
            self.engine.buffer.append(derived, now)
        self.evaluate(now)

    def run_exited(self, source: str, run: str, status: int) -> None:
        """A run's process (alertd's own child) exited with `status`: its end, evaluated at once."""
        now = self.clock.now()
        derived = self.engine.runs.exited(source, run, status, now)
        if derived:
            self.engine.buffer.append(derived, now)
        self.evaluate(now)

    def flush_groups(self) -> None:
        """Send what every open group holds now, whatever its timers (alertd exec's child has ended)."""
        assert self.dispatcher is not None
        now = self.clock.now()
        alerts = {a.fingerprint: a for a in self.engine.state.alerts(self.engine.ruleset.rules)}
        try:
            self.dispatcher.flush_groups(alerts, now)
        except sqlite3.Error as exc:
            self.store.failed()
            self.fatal(f"can't write the state directory {self.state_dir} ({exc}); alertd stops")
            return
        self._wake.set()

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until nothing is left to deliver now or within the next second."""
        assert self.dispatcher is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for notifier in self.notifiers.values():  # a kill under way reports how its process ended
            idle = getattr(notifier, "wait_idle", None)
            if idle is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(idle(), max(0.0, deadline - loop.time()))
        while loop.time() < deadline:
            now = self.clock.now()
            wake = self.dispatcher.next_wakeup()
            if self.dispatcher.outbox.next_due() is None and (wake is None or wake > now + 1.0):
                return
            self._wake.set()
            await asyncio.sleep(0.05)

    async def _shutdown(self, deliveries: asyncio.Task[None]) -> None:
        self.ready = False
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        self._wake.set()
        try:
            await asyncio.wait_for(deliveries, 5)
        except (TimeoutError, asyncio.CancelledError):
            deliveries.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self.watcher is not None:
            self.watcher.close()
        for source in self.sources.values():
            await _quietly(source.aclose())
        for notifier in self.notifiers.values():
            await _quietly(notifier.aclose())
        self.close()
        log.info("alertd stopped")

    def close(self) -> None:
        """Save the state and close the state directory's databases."""
        self.outbox.retry_now()  # what memory holds: a last try
        try:
            self.save_state()
        except sqlite3.Error as exc:
            self.fatal(f"can't write the state directory {self.state_dir} ({exc})")
        if self.outbox.unsaved is not None:
            self.fatal(f"can't write the state directory {self.state_dir} ({self.outbox.unsaved}): the state is lost")
        self.silences.close()
        self.outbox.close()


async def _poll(source: Source, now: float, paths: frozenset[str] | None = None) -> list[Sample]:
    poll_changed = getattr(source, "poll_changed", None) if paths is not None else None
    if poll_changed is not None:
        return list(await poll_changed(now, paths))
    return list(await source.poll(now))


async def _quietly(coro: object) -> None:
    try:
        await coro  # type: ignore[misc]
    except Exception as exc:
        log.warning("while closing: %s", exc)


def _config_fp(sources: Sequence[SourceConfig], name: str) -> str | None:
    cfg = next((s for s in sources if s.name == name), None)
    return None if cfg is None else fingerprint(cfg.model_dump_json())


def _log_warnings(config: Config) -> None:
    """What `alertd check` prints as warnings (a severity no route uses), logged once per load."""
    for warning in config.warnings:
        log.warning("rules: %s", warning)


def _log_storm(rest: Sequence[Transition]) -> None:
    """The transitions of one evaluation past TRANSITIONS_LOGGED: one line, counted by rule and state."""
    counts: dict[tuple[str, str], int] = {}
    for t in rest:
        counts[(t.rule, t.state.value)] = counts.get((t.rule, t.state.value), 0) + 1
    shown = ", ".join(f"{rule} {state}: {n}" for (rule, state), n in sorted(counts.items()))
    log.warning("and %d more transitions of this evaluation (%s)", len(rest), shown, extra={"transitions": len(rest)})


def _log_transition(t: Transition) -> None:
    """A transition on alertd's log: WARNING while a critical or warning alert is pending or firing, INFO for an
    `info` alert and for every resolution (`alertd.notify.log.level_of` judges the log notifier's lines alike)."""
    firing = t.state in (TransitionKind.FIRING, TransitionKind.PENDING)
    level = logging.WARNING if firing and t.severity != "info" else logging.INFO
    labels = dict(t.labels)
    log.log(
        level,
        "alert %s %s %s",
        t.rule,
        t.state.value,
        ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        extra={"rule": t.rule, "state": t.state.value, "step": t.step, "value": str(t.value)},
    )


def run_service(
    paths: Sequence[str], *, listen: str | None = None, state_dir: str | None = None, log_format: str = "auto"
) -> int:
    """`alertd run`: run until SIGINT or SIGTERM; 0 on a clean stop, 1 on a bad rules file."""
    setup_logging(log_format)
    if state_dir:
        os.environ["ALERTD_STATE_DIR"] = state_dir
    if (why := _token_problem(listen)) is not None:
        log.error("%s", why)
        return 1
    try:
        service = Service(paths)
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("%s", problem)
        return 1
    except StateDirError as exc:
        log.error("%s", exc)
        return 1
    return asyncio.run(_main(service, listen))


async def _main(service: Service, listen: str | None, handle_signals: bool = True) -> int:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonExecutor())
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, service.stop)
        loop.add_signal_handler(signal.SIGHUP, service.reload_later)
    api = None
    if listen:
        from alertd.api import serve_api
        from alertd.api.hosts import ENV as HOSTS_ENV
        from alertd.api.hosts import split_hosts

        roots = [r for r in os.environ.get("ALERTD_DRY_RUN_ROOTS", "").split(os.pathsep) if r]
        try:
            token = api_token()
        except ApiTokenError as exc:  # checked at start; the file went since
            log.error("%s: the HTTP API is not served; alertd stops", exc)
            return 1
        hosts = split_hosts(os.environ.get(HOSTS_ENV, ""))
        api = asyncio.create_task(serve_api(service, listen, token=token, dry_run_roots=roots, api_hosts=hosts))
        api.add_done_callback(lambda task: _api_ended(task, service))
    try:
        await service.run()
    finally:
        if api is not None:
            api.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await api
    return service.exit_code


class ApiTokenError(ValueError):
    """The API's token is asked for but can't be had: alertd does not start (one line naming the file)."""


def api_token() -> str | None:
    """The API's bearer token: ALERTD_API_TOKEN, else the content of the file ALERTD_API_TOKEN_FILE names; None
    when neither is set. A file that can't be read or holds only blanks, or an ALERTD_API_TOKEN set to nothing
    but blanks, is an ApiTokenError naming it (never an API without authentication)."""
    token = os.environ.get("ALERTD_API_TOKEN")
    path = os.environ.get("ALERTD_API_TOKEN_FILE")
    if token is not None and token.strip():
        return token.strip()
    if path:
        try:
            text = read_secret_file(path, "ALERTD_API_TOKEN_FILE").strip()
        except ValueError as exc:
            raise ApiTokenError(f"the API token: {exc}") from None
        if not text:
            raise ApiTokenError(f"the API token: ALERTD_API_TOKEN_FILE: {path} holds only blanks")
        return text
    if token is not None:
        raise ApiTokenError("the API token: ALERTD_API_TOKEN is set but empty")
    return None


def _token_problem(listen: str | None) -> str | None:
    """Why the API can't be served (its token can't be had), or None; nothing is asked without `listen`."""
    if not listen:
        return None
    try:
        api_token()
    except ApiTokenError as exc:
        return f"{exc}: alertd does not start"
    return None


def _api_ended(task: asyncio.Task[None], service: Service) -> None:
    if task.cancelled() or task.exception() is None:
        return
    log.error("the HTTP API stopped: %s", task.exception())
    service.stop()


EXEC_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals `alertd exec` takes for its child: forwarded (see `_forward_signals`), never its own end."""
JOB_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""Signals a job's supervisor sends to every process of the job (Slurm's `scancel --signal=USR1 --full`): one
from an ancestor of alertd reached the child too, and is not sent to it twice."""
EXEC_DRAIN = 10.0
"""Seconds `alertd exec` waits, after its child exited, for the notifications of its end to go out."""
_SI_KERNEL = 0x80


def run_exec(
    argv: Sequence[str],
    paths: Sequence[str],
    *,
    run: str | None = None,
    listen: str | None = None,
    state_dir: str | None = None,
    log_format: str = "auto",
    stop: bool = False,
) -> int:
    """`alertd exec -- COMMAND ...`: run the trainer as a child, watched; exit with its status.

    alertd's logs and console notifications go to stderr (its stdout is the child's). SIGINT, SIGTERM
    and SIGHUP sent to alertd are forwarded to the child; one the terminal sent to the whole process
    group (Ctrl-C) reached the child already and is not sent twice. The status is the child's exit
    code, 128+N when a signal N ended it, 127 when the command does not exist, and 2 when the rules
    files are bad or no state directory can be had (the child is then not started).

    The state lives in `state_dir` (`--state-dir`, else $ALERTD_STATE_DIR), else in one of its own per run
    name, `./.state/exec/<run>` (`<run>.2`, ... while another alertd exec of that name holds it), so that an
    exec starts its trainer beside a service using `./.state`. `stop`: add the exec stop to the rules
    (`alertd.exec_stop`; the built-in rules without `--no-stop`).
    """
    setup_logging(log_format)
    if (why := _token_problem(listen)) is not None:
        log.error("%s", why)
        return 2
    name = run or _run_name(argv)
    explicit = state_dir or os.environ.get(STATE_DIR_ENV)
    stop_file = None
    own = os.environ.get(STOP_FILE_ENV, "")
    service: Service | None = None
    for directory in [Path(explicit)] if explicit else _exec_state_dirs(name):
        if stop:  # the stop file the child's callbacks will look for: its own (absolute), else in the state
            stop_file = own if os.path.isabs(own) else str((directory / STOP_FILE_NAME).absolute())
        amend = (lambda config, path=stop_file: with_exec_stop(config, path)) if stop_file else None
        try:
            service = Service(paths, console=sys.stderr, exec_mode=True, state=directory, amend=amend)
            break
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("%s", problem)
            return 2
        except StateDirLocked as exc:
            if explicit:
                log.error(
                    "%s: give this alertd exec a state directory of its own (alertd exec --state-dir DIR -- ...)", exc
                )
                return 2
            log.info("alertd exec: %s; trying the next", exc)
        except StateDirError as exc:
            log.error("%s (alertd exec --state-dir DIR chooses another)", exc)
            return 2
    if service is None:
        log.error("alertd exec: every state directory for run %s is in use: give one with --state-dir DIR", name)
        return 2
    env = {}
    if stop_file is not None and stop_file != own:
        env[STOP_FILE_ENV] = stop_file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stop_file)  # an earlier child's request it never honoured (a script without the callbacks)
    # Block the signals before any thread exists, so that only the forwarding thread takes them.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, EXEC_SIGNALS)
    try:
        status = asyncio.run(_exec_main(service, list(argv), name, listen, env))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if status is None:
        return 127
    return 128 - status if status < 0 else status


STOP_FILE_NAME = "ALERTD_STOP"
STOP_FILE_ENV = "ALERTD_STOP_FILE"
"""The stop file alertd's training callbacks look for (`alertd.integrations.stop`)."""
EXEC_STATE_DIRS = 9
"""State directories `alertd exec` tries per run name: `<run>`, then `<run>.2` ... `<run>.9`."""


def _exec_state_dirs(run: str) -> list[Path]:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:100].lstrip(".") or "run"
    base = Path(".state") / "exec"
    return [base / safe, *(base / f"{safe}.{n}" for n in range(2, EXEC_STATE_DIRS + 1))]


async def _exec_main(
    service: Service, argv: list[str], run: str, listen: str | None, env: dict[str, str] | None = None
) -> int | None:
    loop = asyncio.get_running_loop()
    main = asyncio.create_task(_main(service, listen, handle_signals=False))
    while not service.ready:
        if main.done():
            await main
            return None
        await asyncio.sleep(0.01)

    def deliver(samples: list[Sample]) -> None:
        loop.call_soon_threadsafe(lambda: service.ingest(samples, service.clock.now()))

    child = ChildRun(argv, run=run, on_samples=deliver, env=env)
    service.earlier_run_ended(child.source, run)  # restored alerts of an earlier child: that run is over
    try:
        pid = child.start()
    except OSError as exc:
        log.error("alertd exec: can't start %s: %s", argv[0], exc.strerror or exc)
        service.stop()
        await main
        return None
    service.child = child
    log.info("alertd exec: started %s (pid %d) as run %s", argv[0], pid, run)
    threading.Thread(target=_forward_signals, args=(child,), name="exec-signals", daemon=True).start()
    status = await loop.run_in_executor(None, child.wait)
    log.info("alertd exec: %s (pid %d) exited with status %d", argv[0], pid, status)
    service.run_exited(child.source, run, status)
    await service.drain(EXEC_DRAIN)  # the actions under way report how the child ended
    service.flush_groups()  # alertd ends with its child: what waits in a group is told now
    await service.drain(EXEC_DRAIN)
    service.stop()
    await main
    return status


def _forward_signals(child: ChildRun) -> None:
    """Take SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 (blocked everywhere else) and pass them on to the
    child, once: not a signal the terminal sent to the whole foreground process group (Ctrl-C), nor a
    SIGUSR1/SIGUSR2 from one of alertd's own ancestors, which signals the whole job (Slurm's scancel
    --signal=USR1 --full from slurmstepd, a shell's kill of the process group): the child has it already."""
    procfs = Procfs()
    while child.status is None:
        info = signal.sigwaitinfo(EXEC_SIGNALS)
        sig = signal.Signals(info.si_signo)
        if info.si_code == _SI_KERNEL:
            continue  # from the terminal, to the whole foreground process group: the child has it too
        if sig in JOB_SIGNALS and info.si_pid in procfs.ancestors(os.getpid()):
            log.info("alertd exec: %s from pid %d, which signals the whole job: not forwarded", sig.name, info.si_pid)
            continue
        log.info("alertd exec: forwarding %s to pid %s", sig.name, child.pid)
        child.send(sig)


def _run_name(argv: Sequence[str]) -> str:
    """The `run` label of a child: its script (`python train.py` -> train.py) or its command's name."""
    names = [os.path.basename(a) for a in argv[:3] if not a.startswith("-")]
    if len(names) > 1 and names[0].startswith("python"):
        return names[1]
    return names[0] if names else "exec"
