"""The in-process actions (`lr_scale`, `skip_step`, `save`): a command to the trainer, acknowledged by it.

On each alert that turns FIRING (once per firing: `Firings`), the notifier writes one command file into the run's
commands directory (`alertd.integrations.commands`: atomically, `<time_ns>-<notifier>-<action>.cmd`). The
directory is the expanded `path` template (alert labels as `{run}`), checked as the `stop_file` notifier's path
(no `..` part; with `base_dir`, neither the path nor its real location leaves it) and never created: a missing
directory means the run is not where the path says (alertd's callbacks create theirs at the start of training).
With `at_most`, a run whose directory already holds that many commands of this notifier (pending or done) is
refused. Then, in a background task (the delivery never waits for the trainer), the notifier waits up to `wait`
for the trainer's acknowledgement `<name>.ack` (its step, its old and new LR, the checkpoint it saved, or why it
refused) and reports it: one `CommandReport` per firing, handed to `report` (the service announces it) and kept
in `history`. A refusal here or by the trainer is reported and never retried; a file-system error that may pass
(a full disk) raises `NotifyError(recoverable=True)` and the delivery is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from alertd.actions.base import Firings, Reports
from alertd.actions.config import LrScaleConfig, SaveConfig, SkipStepConfig
from alertd.actions.stop_file import StopFileNotifier
from alertd.errors import NotifyError
from alertd.integrations import commands
from alertd.model import Notification, Transition, format_time, format_value

log = logging.getLogger(__name__)

POLL = 0.1
"""Seconds between two looks for the trainer's acknowledgement."""

InProcessConfig = LrScaleConfig | SkipStepConfig | SaveConfig


@dataclass(frozen=True, slots=True)
class CommandReport:
    """What became of one command: the trainer's acknowledgement (`step`, `old_lr`, `new_lr`, `checkpoint`), or
    why it was refused (by alertd or by the trainer), or that no acknowledgement came within `wait`."""

    action: str
    notifier: str
    fingerprint: str
    rule: str
    path: str = ""
    """The command file (`.cmd`), once written."""
    acked: bool = False
    step: int | None = None
    old_lr: float | None = None
    new_lr: float | None = None
    checkpoint: str = ""
    refused: str | None = None
    waited: float = 0.0
    stamp: str = ""
    """The firing's start: tells this firing's report from an earlier one's (the announcement's key)."""
    signals: tuple[()] = ()

    def summary(self) -> str:
        """One line for people."""
        head = f"{self.action} {self.notifier} for {self.rule}: "
        if self.refused is not None:
            at = f" (step {self.step})" if self.step is not None else ""
            return f"{head}REFUSED{at}: {self.refused}"
        if not self.acked:
            return f"{head}asked the trainer via {self.path}; no acknowledgement within {self.waited:g}s"
        if self.action == "lr_scale":
            return f"{head}the trainer scaled its LR {self.old_lr:g} -> {self.new_lr:g} at step {self.step}"
        if self.action == "skip_step":
            return f"{head}the trainer skipped the update of step {self.step}"
        return f"{head}the trainer saved {self.checkpoint} at step {self.step}"

    def as_json(self) -> dict[str, object]:
        """For `/api/v1/runs` and the run page: the trainer's acknowledgement (or why there was none)."""
        return {
            "action": self.action,
            "notifier": self.notifier,
            "rule": self.rule,
            "acked": self.acked,
            "step": self.step,
            "old_lr": self.old_lr,
            "new_lr": self.new_lr,
            "checkpoint": self.checkpoint or None,
            "refused": self.refused,
            "summary": self.summary(),
        }


class InProcessNotifier:
    """Writes the command of its type (`lr_scale`, `skip_step`, `save`) for each newly firing alert's run, then
    reports the trainer's acknowledgement."""

    def __init__(
        self, name: str, cfg: InProcessConfig, *, report: Callable[[CommandReport], Awaitable[None]] | None = None
    ) -> None:
        self.name = name
        self.cfg = cfg
        self._paths = StopFileNotifier(name, cfg.stop_file_config())
        self._acted = Firings()
        self._reports: Reports[CommandReport] = Reports(f"{cfg.type} {name}", log, report)
        self.history = self._reports.history
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, notification: Notification) -> None:
        """Write the command of each newly firing alert; a refusal is reported, a file-system error that may pass
        is raised after the rest (the delivery is retried)."""
        failure: NotifyError | None = None
        for alert in self._acted.fresh(notification):
            base = CommandReport(self.cfg.type, self.name, alert.fingerprint, alert.rule, stamp=f"{alert.since:.3f}")
            try:
                async with self._lock:
                    path = await asyncio.to_thread(self._write, alert)
            except NotifyError as e:
                if e.recoverable:
                    log.error("%s %s: %s", self.cfg.type, self.name, e)
                    failure = failure or e
                    continue
                self._acted.add(alert.firing_id)
                await self._reports.emit(replace(base, refused=str(e).removeprefix(f"{self.cfg.type} {self.name}: ")))
                continue
            self._acted.add(alert.firing_id)
            task = asyncio.create_task(self._await_ack(replace(base, path=path)), name=f"{self.cfg.type}-{self.name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        """Stop waiting for acknowledgements: each is reported as not acknowledged (yet)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)

    async def wait_idle(self) -> None:
        """Wait until every acknowledgement has been waited for and reported (tests)."""
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending)

    def directory(self, alert: Transition) -> str:
        """The run's commands directory for `alert`, checked; NotifyError(recoverable=False) when refused."""
        try:
            path = self._paths.path_for(alert)
        except NotifyError as e:
            raise self._fail(str(e).removeprefix(f"stop_file {self.name}: ")) from None
        base = self.cfg.base_dir
        if base is not None and not path.resolve().is_relative_to(Path(os.path.normpath(base)).resolve()):
            raise self._fail(f"path {str(path)!r} (from {self.cfg.path!r}) leaves base_dir {base!r}")
        if not path.is_dir():
            raise self._fail(f"commands directory {str(path)!r} does not exist (not created)")
        return str(path)

    def _write(self, alert: Transition) -> str:
        directory = self.directory(alert)
        if self.cfg.at_most is not None:
            done = commands.count(directory, self.name, self.cfg.type)
            if done >= self.cfg.at_most:
                raise self._fail(f"at_most {self.cfg.at_most} reached for this run ({done} commands in {directory})")
        body: dict[str, Any] = {
            "rule": alert.rule,
            "labels": dict(alert.labels),
            "value": format_value(alert.value),
            "step": alert.step,
            "time": format_time(alert.time),
        }
        if isinstance(self.cfg, LrScaleConfig):
            body |= {"factor": self.cfg.factor, "min_lr": self.cfg.min_lr}
        try:
            name = commands.send(directory, self.name, self.cfg.type, body)
        except OSError as e:
            raise NotifyError(
                f"{self.cfg.type} {self.name}: can't write in {directory}: {e.strerror}", recoverable=True
            ) from e
        return os.path.join(directory, name + commands.SUFFIX)

    async def _await_ack(self, report: CommandReport) -> None:
        ack = report.path.removesuffix(commands.SUFFIX) + commands.ACK
        start = time.monotonic()
        body: dict[str, Any] | str = "no acknowledgement"
        try:
            while True:
                if os.path.lexists(ack):
                    body = await asyncio.to_thread(commands.read_json, ack)
                    break
                if time.monotonic() - start >= self.cfg.wait:
                    break
                await asyncio.sleep(POLL)
        finally:
            waited = round(time.monotonic() - start, 1)
            with contextlib.suppress(asyncio.CancelledError):
                await self._reports.emit(_acknowledged(replace(report, waited=waited), body))

    def _fail(self, message: str) -> NotifyError:
        return NotifyError(f"{self.cfg.type} {self.name}: {message}", recoverable=False)


def _acknowledged(report: CommandReport, ack: dict[str, Any] | str) -> CommandReport:
    """The report, with what the trainer's acknowledgement says (a str: why it could not be read, or none came)."""
    if isinstance(ack, str):
        return report if ack == "no acknowledgement" else replace(report, refused=f"unreadable acknowledgement: {ack}")
    step = ack.get("step")
    report = replace(
        report,
        acked=True,
        step=step if isinstance(step, int) else None,
        old_lr=_float(ack.get("old_lr")),
        new_lr=_float(ack.get("new_lr")),
        checkpoint=str(ack.get("checkpoint") or ""),
    )
    if ack.get("applied") is not True:
        return replace(report, refused=f"the trainer refused: {str(ack.get('refused') or 'no reason given')[:300]}")
    return report


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
