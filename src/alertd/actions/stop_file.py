"""The stop-file notifier: asks a training loop to stop itself by creating a file it polls.

On each alert that turns FIRING (once per firing: fingerprint + `active_at`), the file at
`StopFileConfig.path` is created atomically (written to a temporary file in the same directory, then
renamed over the path), so the loop never reads half a file. Its body is a small JSON object (notifier,
rule, labels, value, step, time, active_at, summary) that the loop can log to say why it stopped.

The path template substitutes alert labels only: `{run}` becomes the value of label `run`; `{{` and `}}`
are literal braces; nothing is evaluated. A path that, once expanded, has a `..` part, or leaves
`base_dir` (also through a symbolic link), is refused. A missing label, a refused path or a missing
directory are refusals, reported (`StopFileReport.refused`) and never retried; other file-system errors (a
full disk) raise `NotifyError(recoverable=True)`, and the delivery is retried. The directory is never
created: a missing run directory means the run is not where the path says. Every outcome is one
`StopFileReport` to `report` (the service announces it, as kill's) and in `history`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from alertd.actions.base import Firings, Reports
from alertd.actions.config import StopFileConfig
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, format_time, format_value

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StopFileReport:
    """What the notifier did for one alert: the stop file it created, or why it refused."""

    action: ClassVar[str] = "stop_file"
    notifier: str
    fingerprint: str
    rule: str
    path: str = ""
    refused: str | None = None
    stamp: str = ""
    """The firing's start: tells this firing's report from an earlier one's (the announcement's key)."""
    signals: tuple[()] = ()

    def summary(self) -> str:
        """One line for people."""
        head = f"stop_file {self.notifier} for {self.rule}: "
        if self.refused is not None:
            return f"{head}REFUSED: {self.refused}"
        return f"{head}asked the run to stop via {self.path}"


class StopFileNotifier:
    """Creates the stop file named by the alert's labels, once per firing; `report` gets what it did."""

    def __init__(
        self, name: str, cfg: StopFileConfig, *, report: Callable[[StopFileReport], Awaitable[None]] | None = None
    ) -> None:
        self.name = name
        self.cfg = cfg
        self._parts = cfg.template_parts()
        self._acted = Firings()
        self._reports: Reports[StopFileReport] = Reports(f"stop_file {name}", log, report)
        self.history = self._reports.history

    async def send(self, notification: Notification) -> None:
        """Write the stop file of each newly firing alert; a refusal is reported, a file-system error that may
        pass (a full disk) is raised after the rest (the delivery is retried)."""
        failure: NotifyError | None = None
        for alert in self._acted.fresh(notification):
            key = alert.firing_id
            base = StopFileReport(self.name, alert.fingerprint, alert.rule, stamp=f"{alert.since:.3f}")
            try:
                path = await self.create(alert)
            except NotifyError as e:
                if e.recoverable:
                    log.error("stop_file %s: %s", self.name, e)
                    failure = failure or e
                    continue
                self._acted.add(key)
                await self._reports.emit(replace(base, refused=str(e)))
                continue
            self._acted.add(key)
            await self._reports.emit(replace(base, path=str(path)))
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        """Nothing to release."""

    async def create(self, alert: Transition) -> Path:
        """Write the stop file of `alert` now (no once-per-firing bookkeeping) and return its path.

        The kill notifier's `ask_first` step uses this too. Raises `NotifyError` as `send` does.
        """
        path = self.path_for(alert)
        await asyncio.to_thread(self._write, path, self._body(alert))
        return path

    def path_for(self, alert: Transition) -> Path:
        """The expanded, checked path for `alert`; NotifyError(recoverable=False) when refused."""
        return self.path_for_labels(dict(alert.labels))

    def path_for_labels(self, labels: Mapping[str, str]) -> Path:
        """The expanded, checked path for an alert with `labels`; NotifyError(recoverable=False) when refused."""
        text = []
        for is_label, part in self._parts:
            if not is_label:
                text.append(part)
            elif part in labels:
                text.append(labels[part])
            else:
                raise self._fail(f"the alert has no label {part!r} for path template {self.cfg.path!r}")
        raw = "".join(text)
        if "\0" in raw or ".." in Path(raw).parts:
            raise self._fail(f"path {raw!r} (from template {self.cfg.path!r}) has a '..' part or a NUL")
        if self.cfg.base_dir is None:
            return Path(os.path.normpath(raw))
        base = Path(os.path.normpath(self.cfg.base_dir))
        path = Path(os.path.normpath(base / raw))
        real_base = base.resolve()
        real_parent = path.parent.resolve()
        if not (path.is_relative_to(base) and real_parent.is_relative_to(real_base)) or path == base:
            raise self._fail(f"path {str(path)!r} (from {self.cfg.path!r}) leaves base_dir {str(base)!r}")
        return path

    def _body(self, alert: Transition) -> str:
        return json.dumps(
            {
                "notifier": self.name,
                "rule": alert.rule,
                "state": alert.state.value,
                "labels": dict(alert.labels),
                "value": format_value(alert.value),
                "step": alert.step,
                "time": format_time(alert.time),
                "active_at": format_time(alert.active_at) if alert.active_at is not None else None,
                "summary": dict(alert.annotations).get("summary"),
            },
            indent=2,
        )

    def _fail(self, message: str) -> NotifyError:
        return NotifyError(f"stop_file {self.name}: {message}", recoverable=False)

    def _write(self, path: Path, body: str) -> None:
        if not path.parent.is_dir():
            raise self._fail(f"directory {str(path.parent)!r} does not exist (not created)")
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(body + "\n")
                    f.flush()
                    os.fchmod(f.fileno(), 0o644)
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            message = f"stop_file {self.name}: can't write {path}: {e.strerror}"
            raise NotifyError(message, recoverable=True) from e
