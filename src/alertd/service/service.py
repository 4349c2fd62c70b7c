"""The running service: sources -> buffer -> rules -> dispatcher -> notifiers, built and driven.

A poll that brings samples appends them to the buffer and evaluates the rules at once; a tick at the evaluation
interval evaluates the time-based conditions (`for`, `absent`, `keep_firing_for`). Transitions go to the dispatcher,
which writes what is due to the outbox in one transaction with the alert states and the sources' cursors. The
collaborators, owned here and given callbacks: the source runner (`sources`), the writer checks (`writers`), the
state keeper (`state`), the notifiers (`notifiers`) and the deliveries (`delivery`). Blocking work runs on daemon
threads (`alertd.threads`); rules files are read and checked off the event loop on reload.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from alertd.actions.config import RecoverConfig
from alertd.actions.recover import Supervisor
from alertd.buffer import SeriesBuffer
from alertd.clock import Clock, SystemClock
from alertd.config import Config, load_config
from alertd.dispatch.announce import ActionReport
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox, state_dir
from alertd.dispatch.silences import SilenceStore
from alertd.errors import ConfigError
from alertd.model import Alert, Sample, Transition, TransitionKind
from alertd.notify.base import Notifier
from alertd.notify.warm import warm_http
from alertd.rules.carry import carry_over
from alertd.rules.evaluate import AlertMemo, PairKey, RuleSet
from alertd.runs.tracker import RunTracker, action_entry
from alertd.service.child import ChildRun
from alertd.service.delivery import Deliveries
from alertd.service.engine import Engine, log, log_evaluation, log_restarts, log_warnings
from alertd.service.heap import HeapFreezer
from alertd.service.notifiers import Notifiers, announce
from alertd.service.sources import SourceRunner, quietly
from alertd.service.state import StateKeeper
from alertd.service.writers import WriterChecks
from alertd.sources.base import Source

HOUSEKEEPING_EVERY = 10.0
"""Seconds between two evictions of old samples and prunings of old log entries."""
TRANSITION_LOG = 20_000
"""Recent transitions kept in memory for the web page's alert spans (`transition_log`)."""


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
        freeze_heap: bool = False,
    ) -> None:
        self.paths = list(paths)
        self.freeze_heap = freeze_heap
        """Whether to freeze the start-up objects out of the collector's passes (`alertd.service.heap`): the
        process's own service only (`alertd run`, `alertd exec`), never one a library or a test runs in process."""
        self.amend = amend
        """What the composition adds to the rules files' configuration, at start and at every reload (the
        exec stop: `alertd.service.exec_stop`)."""
        self.clock = clock or SystemClock()
        self.transition_log: deque[Transition] = deque(maxlen=TRANSITION_LOG)
        """The newest transitions, for the run page's alert spans (not persisted)."""
        config = self._load()
        self.engine = Engine(
            config, SeriesBuffer(config.buffer), RuleSet(config.rules), runs=RunTracker(config.stall_after)
        )
        self.engine.buffer.pinned = lambda key: self.engine.alerting(key)  # a series with an alert keeps its place
        self.state_dir = state or state_dir()
        self.runner = SourceRunner(
            self.clock, lambda: self.config, lambda: self.engine.buffer, lambda: self.state, self.ingest, self._before
        )
        self.state = StateKeeper(self.state_dir, self.clock, self.runner.busy)  # StateDirError
        self.writer_checks = WriterChecks(self.runner.busy)
        self.heap = HeapFreezer()
        self.child: ChildRun | None = None
        self.recovery: Supervisor | None = None
        """alertd exec's supervisor of the `recover` notifiers (`alertd.service.recovery`); None otherwise."""
        self.slurm_recovery: Supervisor | None = None
        """The supervisor of the `recover` notifiers with `target: slurm` (`alertd.service.slurm_recovery`)."""
        self.receivers = Notifiers(
            self.writer_checks.registry,
            self._child,
            exec_mode=exec_mode,
            console=console,
            supervisor=self._supervisor_for,
            collective_lines=self._collective_lines,
        )
        self.receivers.report = self._announce
        self.deliveries = Deliveries(self._alerts, self.clock.now)
        self.scheduler: AsyncIOScheduler | None = None
        self.exit_code = 0
        self.ready = False
        self.started_at: float | None = None
        """When the service started running (Alertmanager's `uptime`), epoch seconds."""
        self._planned: frozenset[PairKey] | None = None
        """The alerts active when the dispatcher last planned (None: plan at the next evaluation)."""
        self._alert_memo = AlertMemo()
        self._reloading = False
        self._stop = asyncio.Event()
        self._closing: set[asyncio.Task[Any]] = set()

    # what the API and the tests look at
    @property
    def config(self) -> Config:
        """The rules files now in force."""
        return self.engine.config

    @property
    def sources(self) -> dict[str, Source]:
        """The sources, by name."""
        return self.runner.sources

    @property
    def health(self) -> dict[str, Any]:
        """Each source's health, by name."""
        return self.runner.health

    @property
    def watching(self) -> dict[str, str]:
        """How each file source learns of changes: "notify", or why it polls."""
        return self.runner.watching

    @property
    def notifiers(self) -> dict[str, Notifier]:
        """The notifiers and actions, by name."""
        return self.receivers.by_name

    @property
    def dispatcher(self) -> Dispatcher | None:
        """The dispatcher (built by `open`)."""
        return self.deliveries.dispatcher

    @property
    def silences(self) -> SilenceStore:
        """The silences."""
        return self.state.silences

    @property
    def outbox(self) -> Outbox:
        """The outbox."""
        return self.state.outbox

    # building and reloading

    def _load(self) -> Config:
        """Read and check the rules files (ConfigError), with what `amend` adds."""
        config = load_config(self.paths)
        return self.amend(config) if self.amend is not None else config

    def open(self) -> None:
        """Build the sources, notifiers and dispatcher, and take up the state of the previous run."""
        config = self.config
        log_warnings(config)
        self.runner.build(config.sources)
        self.deliveries.build(config, self.receivers.build(config), self.state.outbox, self.state.silences)
        self.state.restore(self.engine, self.sources)
        self.state.save(self.engine, self.sources)  # at once: a crash in the first seconds must not read all again

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
        self.runner.reconfigure(old.config, config, self._close_later)
        self.receivers.reconfigure(old.config, config, self._close_later)
        self.deliveries.reconfigure(config, self.notifiers)
        log.info("rules reloaded: %d rules (%d unchanged)", len(config.rules), len(kept))
        log_warnings(config)
        return []

    def _close_later(self, thing: Source | Notifier) -> None:
        """Close a source or notifier that a reload replaced, without waiting for it here."""
        self._later(quietly(thing.aclose()), "close")

    def _later(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _supervisor_for(self, cfg: RecoverConfig) -> Supervisor | None:
        """What restarts the run for a `recover` notifier: alertd exec's (target child), the Slurm one (made on
        first use)."""
        if cfg.target == "child":
            return self.recovery
        if self.slurm_recovery is None:
            from alertd.service.slurm_recovery import SlurmRecovery

            self.slurm_recovery = SlurmRecovery(
                read=self.state.record,
                commit=self.commit_record,
                registry=self.writer_checks.registry,
                slurm_sources=lambda: frozenset(s.name for s in self.config.sources if s.type == "slurm"),
                exec_mode=self.receivers.exec_mode,
            )
        return self.slurm_recovery

    def commit_record(self, key: str, value: str | None) -> None:
        """Commit `value` under `key` in the state directory with the alert states (None: delete it); a failure is
        the state directory's (`state_failed`), never raised."""
        try:
            self.state.save_record(key, value, self.engine, self.sources)
        except sqlite3.Error as exc:
            self.state_failed(exc)

    def _child(self) -> tuple[int, int] | None:
        return self.child.identity() if self.child is not None else None

    def _collective_lines(self) -> list[str]:
        return self.child.collective_lines() if self.child is not None else []

    async def _announce(self, report: ActionReport) -> None:
        assert self.dispatcher is not None
        alerts = self.engine.state.alerts(self.engine.ruleset.rules)
        now = self.clock.now()
        self._on_its_run(report, alerts, now)
        announce(report, self.dispatcher, self.config.notifiers, alerts, self.transition_log, now)
        self.deliveries.wake()

    def _on_its_run(self, report: ActionReport, alerts: list[Alert], now: float) -> None:
        """Keep the report on the run its alert is about (the alert's `source` and `run` labels; the alert as it
        fired when it has resolved meanwhile): `GET /api/v1/runs`' `actions` and the run page show it."""
        alert: Alert | Transition | None = next((a for a in alerts if a.fingerprint == report.fingerprint), None)
        if alert is None:
            fired = (t for t in reversed(self.transition_log) if t.state is TransitionKind.FIRING)
            alert = next((t for t in fired if t.fingerprint == report.fingerprint), None)
        labels = dict(alert.labels) if alert is not None else {}
        source, run = labels.get("source"), labels.get("run")
        if source is not None and run is not None:
            self.engine.runs.acted(source, run, action_entry(report, now))

    # samples, evaluation, plans

    async def _before(self, source: Source, now: float) -> None:
        """Before a poll's samples: a NaN in a new TensorBoard file needs its writer verified."""
        await self.check_writers(now, only_new=True)

    async def check_writers(self, now: float, *, only_new: bool = False) -> None:
        """Verify the TensorBoard writers (`WriterChecks.check`) and buffer what that says of the runs."""
        derived = await self.writer_checks.check(self.sources, self.engine.runs, now, only_new=only_new)
        if derived:
            self.engine.buffer.append(derived, now)

    def ingest(self, samples: list[Sample], now: float) -> None:
        """Append samples and what they say of their runs, evaluate at `now`, hand the transitions on."""
        samples = self.engine.buffer.fix_times(samples, now)  # unusable times: the arrival clock
        samples = self.state.unseen(samples)  # after a restart: what the saved state evaluated is not judged twice
        derived = self.engine.runs.observe(samples, now)
        if derived:  # series of their own (or `run.finished` where no source wrote it): order kept
            samples = [*samples, *derived]
        log_restarts(self.engine.buffer.append(samples, now))
        self.evaluate(now)

    def evaluate(self, now: float) -> None:
        """Evaluate the rules and submit the transitions."""
        started = self.clock.now()
        ev = self.engine.evaluate(now)
        self.engine.eval_seconds = self.clock.now() - started
        log_evaluation(ev)
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
        save = bool(transitions) or self.state.save_due(self.clock.now())
        active = self.engine.state.active_pairs()
        idle = not transitions and active == self._planned and not self.dispatcher.due(now)
        if idle and not save:
            return
        planned = None
        try:
            if idle:
                self.state.save(self.engine, self.sources)
            else:
                writer = self.state.writer(self.engine, self.sources) if save else None
                planned = self.dispatcher.submit(transitions, self._alerts(), now, also=writer)
                self._planned = active
                self.state.saved()
        except sqlite3.Error as exc:
            self.state_failed(exc)
            return
        if transitions or (planned is not None and planned.notifications):  # to deliver, or group timers moved
            self.deliveries.wake()

    def state_failed(self, exc: sqlite3.Error) -> None:
        """The state directory can't be written: stop (`fatal`)."""
        self.state.failed()
        self.fatal(f"can't write the state directory {self.state_dir} ({exc}); alertd stops")

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
        if (
            self.freeze_heap
            and self.heap.frozen_at is None
            and self.heap.started(self.runner.read_once(), len(self.engine.buffer))
        ):
            log.info("start-up read over: %d objects frozen out of the collector's passes", gc.get_freeze_count())
        saved = self.state.saved_series(now, self.engine.state.active_pairs())
        self.evaluate_with([*self.engine.runs.tick(now), *saved], now)  # runs that stalled; alertd.state.saved

    # lifecycle

    async def run(self) -> None:
        """Run until stop() is called."""
        self.open()
        scheduler = self.scheduler = AsyncIOScheduler()
        self.runner.start(scheduler)
        job = {"max_instances": 1, "coalesce": True, "misfire_grace_time": None}
        scheduler.add_job(self.tick, "interval", seconds=self.config.evaluation_interval, id="tick", **job)
        scheduler.add_job(self._housekeeping, "interval", seconds=HOUSEKEEPING_EVERY, id="housekeeping")
        for name, notifier in self.receivers.resending().items():
            every, resend = notifier.resend_every, self.receivers.resend
            scheduler.add_job(resend, "interval", args=[name, self.clock], seconds=every, id=f"resend:{name}")
        scheduler.start()
        deliveries = asyncio.create_task(self.deliveries.loop(self._stop), name="deliveries")
        await warm_http()  # the first notification must not wait for httpx's lazy imports
        self.ready = True
        self.started_at = self.clock.now()
        log.info(
            "alertd started",
            extra={"rules": len(self.config.rules), "sources": list(self.sources), "state_dir": str(self.state_dir)},
        )
        try:
            await self._stop.wait()
        finally:
            await self._shutdown(deliveries)

    async def _housekeeping(self) -> None:
        self.engine.buffer.evict_all(self.clock.now())
        self.deliveries.prune()
        await asyncio.to_thread(self.state.outbox.checkpoint)  # off the loop: no commit waits for it
        if self.freeze_heap and self.heap.housekeeping(len(self.engine.buffer)):
            log.info("the series doubled: %d objects frozen out of the collector's passes", gc.get_freeze_count())

    def stop(self) -> None:
        """Ask the service to stop (safe to call from a signal handler)."""
        self._stop.set()

    def reload_later(self) -> None:
        """Start a reload without waiting for it (SIGHUP)."""
        self._later(self.reload(), "reload")

    def evaluate_with(self, derived: list[Sample], now: float) -> None:
        """Buffer what is known of runs from elsewhere (alertd exec's child exited), then evaluate at `now`."""
        if derived:
            self.engine.buffer.append(derived, now)
        self.evaluate(now)

    async def _shutdown(self, deliveries: asyncio.Task[None]) -> None:
        self.ready = False
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        self.deliveries.wake()
        try:
            await asyncio.wait_for(deliveries, 5)
        except (TimeoutError, asyncio.CancelledError):
            deliveries.cancel()
        await self.runner.stop()
        for notifier in self.notifiers.values():
            await quietly(notifier.aclose())
        self.close()
        log.info("alertd stopped")

    def close(self) -> None:
        """Save the state and close the state directory's databases."""
        outbox = self.state.outbox
        outbox.retry_now()  # what memory holds: a last try
        try:
            self.state.save(self.engine, self.sources)
        except sqlite3.Error as exc:
            self.fatal(f"can't write the state directory {self.state_dir} ({exc})")
        if outbox.unsaved is not None:
            self.fatal(f"can't write the state directory {self.state_dir} ({outbox.unsaved}): the state is lost")
        self.state.close()
