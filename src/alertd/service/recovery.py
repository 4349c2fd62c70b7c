"""`recover` under alertd exec: the supervisor that rolls its child back and starts it again.

`ExecRecovery` is the `Supervisor` of the `recover` notifiers (`alertd.actions.recover`) while alertd runs as
exec. On an incident it:

1. proves the alert is its child's (its `pid` label is the child or one of the child's own processes, as a
   `kill` with `target: child` does), and that no recovery of this attempt is under way already;
2. reads the checkpoint ledger (`checkpoints:` of the notifier, else `exec: {checkpoints}`, else the directory the
   child's callbacks named at their start, `ALERTD_RUN_INFO`) and plans (`alertd.runs.recovery.decide`);
3. writes the plan next to the ledger (`alertd.integrations.plan`), and commits the run's recovery record (its
   attempt, its incidents and plans, the plan pending) in the same transaction as the alert states: an alertd
   SIGKILLed from here starts the planned attempt when it is started again, once, and forgets no attempt;
4. stops the child without a poisoned save: the stop file at once (alertd's callbacks save only finite weights,
   and stop), SIGINT `wait` later if it still runs, SIGTERM `grace` after that, each at most once;
5. leaves the restart to the exec loop (`take_pending`), `backoff` after the child ended, with
   `ALERTD_RECOVERY_PLAN`, `ALERTD_RESUME_FROM` and `ALERTD_ATTEMPT` in its environment; then reports the new
   attempt's acknowledgement of the plan (the step it resumed at, its LR before and after).

When `decide` gives up (attempts spent, a CUDA OOM) the child is stopped the same way and not started again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from alertd.actions.config import RecoverConfig
from alertd.actions.recover import Emit, RecoverReport
from alertd.integrations import ledger
from alertd.integrations.commands import read_json, write_atomic
from alertd.integrations.plan import ACK_NAME, PLAN_NAME
from alertd.model import Transition, format_value
from alertd.runs.procfs import Procfs
from alertd.runs.recovery import History, Incident, NoPlan, Plan, decide
from alertd.service.child import ChildRun

log = logging.getLogger("alertd.service")

RUN_INFO_NAME = "run-info.json"
"""Where, in the state directory, the child's callbacks say where its checkpoint ledger is (`ALERTD_RUN_INFO`)."""
NO_LEDGER = "no checkpoint ledger known: set `checkpoints:`, or use alertd's training callbacks"
ACK_WAIT = 3600.0
"""Seconds the new attempt's acknowledgement of its plan is waited for at most (its framework's start-up)."""
ACK_POLL = 0.05


@dataclass
class Pending:
    """A plan made, for the attempt after the one running; `backoff` seconds after it ends."""

    plan: Plan
    ledger_dir: str
    backoff: float
    report: RecoverReport
    emit: Emit | None


class ExecRecovery:
    """One alertd exec's recoveries of its run. `child()`: the attempt running (None between attempts);
    `commit(key, value)`: the state directory's record, committed with the alert states."""

    def __init__(
        self,
        run: str,
        child: Callable[[], ChildRun | None],
        commit: Callable[[str, str | None], None],
        read: Callable[[str], str | None],
        *,
        checkpoints: str | None,
        stop_file: str | None,
        run_info: str | None,
    ) -> None:
        self.run = run
        self._child = child
        self._commit = commit
        self.checkpoints = checkpoints
        self.stop_file = stop_file
        self.run_info = run_info
        self.attempt = 1
        self.history = History()
        self.events: set[str] = set()
        """The events the running attempt's output showed."""
        self.pending: Pending | None = None
        self.gave_up = False
        self._acting_on: int | None = None
        """The attempt a recovery (or the give-up) was decided for: one per attempt."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._restore(read(self.run))

    # the record

    def _restore(self, raw: str | None) -> None:
        """Take up what an earlier alertd exec of this run committed: the attempt, the incidents, a plan pending."""
        if raw is None:
            return
        try:
            data = json.loads(raw)
            plans = tuple(plan_from(p) for p in data.get("plans", ()))
            self.history = History(tuple(p.incident for p in plans), plans)
            self.attempt = int(data.get("attempt", 1))
            pending = data.get("pending")
            if isinstance(pending, dict):
                plan = plan_from(pending["plan"])
                base = RecoverReport(str(pending.get("notifier", "recover")), "", plan.incident.rule)
                self.pending = Pending(plan, str(pending["ledger"]), 0.0, base, None)
                log.warning(
                    "alertd exec: run %s: a recovery was planned before alertd stopped: %s", self.run, plan.describe()
                )
        except (ValueError, KeyError, TypeError) as exc:
            log.error(
                "alertd exec: run %s: the saved recovery record is unreadable (%s): starting afresh", self.run, exc
            )
            self.history, self.attempt, self.pending = History(), 1, None

    def _save(self) -> None:
        pending = self.pending
        body: dict[str, Any] = {
            "attempt": self.attempt,
            "plans": [p.as_json(self.run, p.incident.time) | {"widened": p.widened} for p in self.history.plans],
            "pending": None
            if pending is None
            else {
                "plan": pending.plan.as_json(self.run, 0.0),
                "ledger": pending.ledger_dir,
                "notifier": pending.report.notifier,
            },
        }
        self._commit(self.run, json.dumps(body))

    def last_ledger(self) -> str | None:
        """The ledger's directory as known now: `exec: {checkpoints}`, else where the child's callbacks said."""
        return self.checkpoints or self._ledger_from_run_info()

    def finished(self) -> None:
        """The run ended for good (finished, given up, interrupted): its record is dropped."""
        self._commit(self.run, None)

    # the exec loop

    def started(self, attempt: int, events: set[str], pending: Pending | None) -> None:
        """Attempt `attempt` started (as `pending` planned, if given): `events` are its output's; the record says
        it runs; the trainer's acknowledgement of the plan is waited for and reported."""
        self.attempt = attempt
        self.events = events
        self._acting_on = None
        self._save()
        if pending is not None:
            self.resumed(pending)

    def take_pending(self) -> Pending | None:
        """The plan for the next attempt, if one was made (the exec loop starts it)."""
        pending, self.pending = self.pending, None
        return pending

    def resumed(self, pending: Pending) -> None:
        """The attempt of `pending` started: wait for its trainer's acknowledgement of the plan, and report it."""
        if pending.emit is None:
            return
        task = asyncio.create_task(self._await_ack(pending), name=f"recover-ack-{pending.plan.attempt}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop waiting (signals not sent yet are not sent)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)

    # the supervisor

    async def recover(self, cfg: RecoverConfig, alert: Transition, report: RecoverReport, emit: Emit) -> None:
        """Plan a recovery for `alert` and stop the child for it (see the module's documentation)."""
        child = self._child()
        if self._acting_on == self.attempt or self.pending is not None:
            # Another alert of the same incident (the loss and the grad norm both NaN): one recovery an attempt.
            log.info("recover: %s on attempt %d: a recovery of it is under way already", alert.rule, self.attempt)
            return
        try:
            self._check(alert, child)
        except _Refused as exc:
            await emit(replace(report, refused=str(exc)))
            return
        assert child is not None
        found = cfg.checkpoints or self.checkpoints or await asyncio.to_thread(self._ledger_from_run_info)
        directory = os.path.abspath(found) if found is not None else ""
        entries = await asyncio.to_thread(ledger.read, directory) if directory else []
        incident = Incident(alert.rule, alert.step, alert.time, self.attempt, str(format_value(alert.value)))
        outcome = decide(cfg.policy(), self.history, incident, entries, os.path.exists, self.events)
        if isinstance(outcome, NoPlan):
            if not outcome.give_up:
                where = f"in {directory}" if directory else NO_LEDGER
                await emit(replace(report, refused=f"{outcome.why} ({where})"))
                return
            self.gave_up, self._acting_on = True, self.attempt
            await emit(replace(report, phase="gave_up", refused=outcome.why, attempt=self.attempt))
            self._stop(child, cfg)
            return
        try:
            await asyncio.to_thread(
                write_atomic, os.path.join(directory, PLAN_NAME), outcome.as_json(self.run, time.time())
            )
        except OSError as exc:
            await emit(replace(report, refused=f"can't write the plan in {directory}: {exc.strerror or exc}"))
            return
        planned = replace(report, attempt=outcome.attempt, plan=outcome.describe(), checkpoint=outcome.checkpoint)
        self.history = self.history.with_plan(outcome)
        self._acting_on = self.attempt
        self.pending = Pending(outcome, directory, cfg.backoff, planned, emit)
        self._save()
        await emit(planned)
        self._stop(child, cfg)

    def _check(self, alert: Transition, child: ChildRun | None) -> None:
        if child is None or child.identity() is None:
            raise _Refused("no child running (between attempts, or it has ended)")
        labels = dict(alert.labels)
        attempt = labels.get("attempt")
        if attempt is not None and attempt != str(self.attempt):
            raise _Refused(f"the alert is of attempt {attempt}, not of the one running ({self.attempt})")
        named = labels.get("pid")
        if named is None:
            raise _Refused("the alert names no process (`pid` label): it can't be proven to be the child's")
        if not named.isdigit() or (int(named) != child.pid and child.pid not in Procfs().ancestors(int(named))):
            raise _Refused(
                f"the data comes from pid {named[:20]}, which is neither the child (pid {child.pid}) nor one of its own"
            )

    def _ledger_from_run_info(self) -> str | None:
        if self.run_info is None or not os.path.exists(self.run_info):
            return None
        body = read_json(self.run_info)
        where = body.get("ledger") if isinstance(body, dict) else None
        return where if isinstance(where, str) and where else None

    def _stop(self, child: ChildRun, cfg: RecoverConfig) -> None:
        """Ask the child to stop (the stop file), SIGINT `wait` later, SIGTERM `grace` after, each once."""
        if self.stop_file is not None:
            try:
                write_atomic(self.stop_file, {"rule": "recover", "summary": f"alertd recover: attempt {self.attempt}"})
            except OSError as exc:
                log.error("recover: can't create the stop file %s: %s", self.stop_file, exc)
        task = asyncio.create_task(self._escalate(child, cfg), name="recover-stop")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _escalate(self, child: ChildRun, cfg: RecoverConfig) -> None:
        for wait, sig in (
            (cfg.wait if self.stop_file is not None else 0.0, signal.SIGINT),
            (cfg.grace, signal.SIGTERM),
        ):
            deadline = time.monotonic() + wait
            while child.status is None and time.monotonic() < deadline:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if child.status is not None or not child.send(sig):
                return
            log.warning("recover: the child (pid %s) still runs: %s", child.pid, signal.Signals(sig).name)

    async def _await_ack(self, pending: Pending) -> None:
        assert pending.emit is not None
        path = os.path.join(pending.ledger_dir, ACK_NAME)
        deadline = time.monotonic() + ACK_WAIT
        while time.monotonic() < deadline:
            body = await asyncio.to_thread(read_json, path) if os.path.exists(path) else None
            if isinstance(body, dict) and body.get("attempt") == pending.plan.attempt:
                break
            child = self._child()
            if child is not None and child.status is not None:
                return  # it ended before it acknowledged: the exec loop tells that end
            await asyncio.sleep(ACK_POLL)
        else:
            return
        await pending.emit(acknowledged(pending.report, pending.plan, body))


def acknowledged(report: RecoverReport, plan: Plan, body: dict[str, Any]) -> RecoverReport:
    """The `resumed` report of `plan`'s attempt from its trainer's acknowledgement `body` (`ACK_NAME`), after the
    `planned` one, `report`: where it resumed, its LR before and after; or that it refused the plan, and why."""
    report = replace(report, stamp=report.stamp + f"-resumed-{plan.attempt}", phase="resumed")
    if body.get("applied") is not True:
        why = str(body.get("refused") or "no reason given")[:300]
        return replace(report, refused=f"attempt {plan.attempt}'s trainer refused the plan: {why}")
    step = body.get("resumed_step")
    return replace(
        report,
        step=step if isinstance(step, int) else None,
        old_lr=_number(body.get("old_lr")),
        new_lr=_number(body.get("new_lr")),
        checkpoint=str(body.get("checkpoint") or plan.checkpoint),
    )


class _Refused(Exception):
    pass


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def plan_from(data: dict[str, Any]) -> Plan:
    """A plan as `Plan.as_json` wrote it in a recovery record (KeyError, ValueError, TypeError: not one)."""
    skip = data.get("skip") or None
    return Plan(
        int(data["attempt"]),
        str(data["checkpoint"]),
        int(data["checkpoint_step"]),
        (int(skip[0]), int(skip[1])) if skip else None,
        float(data["lr_factor"]),
        Incident.from_json(data["incident"]),
        int(data.get("widened", 0)),
    )
