"""The exec notifier: runs a program for each notification (an argv list, never a shell).

The program gets the generic webhook's JSON (Alertmanager's v4 body, `formats/generic.py`) on stdin and
the common fields in `ALERTD_*` environment variables (`ENV_VARS`). Its environment is otherwise small:
`PATH`, `HOME`, `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`, `TMPDIR`, `USER` and `LOGNAME` from alertd's own
environment (so alertd's other secrets never reach it), then the notifier's `env` (secrets: never logged;
their values are replaced by `…` in captured output and errors; values shorter than 6 characters are not
recognised). The program runs in its own session and process group; at `timeout` the whole group gets
SIGTERM, then SIGKILL `grace` seconds later (grandchildren included).

Outcome: exit 0 = delivered; an exit code in `retry_codes` (default 75, EX_TEMPFAIL) or a timeout =
`NotifyError(recoverable=True)`, retried by the delivery pipeline; any other exit, death by a signal, or
a program that cannot be started = `NotifyError(recoverable=False)`. The first `OUTPUT_CAP` bytes of
stdout and of stderr are kept (the rest is read and dropped) and logged: at debug level on success, at
warning level on failure; the error message carries the end of stderr (at most `ERROR_TAIL` characters).
Descendants that outlive the program after a normal exit are left alone; alertd stops reading their
output `DRAIN_WAIT` seconds after the program exits. `aclose()` (shutdown, reload) kills the groups of the
programs still running; their deliveries fail as recoverable, so they are retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from typing import Any

from alertd.errors import NotifyError
from alertd.model import Notification
from alertd.notify.config import ExecConfig
from alertd.notify.formats import Options
from alertd.notify.formats.generic import build as generic_body
from alertd.notify.formats.redact import Scrubber
from alertd.subproc import killpg, run_program, signal_name

log = logging.getLogger(__name__)

OUTPUT_CAP = 4096
"""Bytes of stdout and of stderr kept per run; the rest is read and dropped."""
ERROR_TAIL = 500
"""Characters of stderr's end put in the error message."""
ENV_VALUE_CAP = 1024
"""Characters at most of one `ALERTD_*` value taken from an alert (labels, annotations)."""
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
"""alertd's own environment variables the program inherits; nothing else of alertd's environment."""
ENV_VARS = (
    "ALERTD_NOTIFIER",
    "ALERTD_RECEIVER",
    "ALERTD_STATUS",
    "ALERTD_GROUP_KEY",
    "ALERTD_KEY",
    "ALERTD_ALERT_COUNT",
    "ALERTD_FIRING_COUNT",
    "ALERTD_RULE",
    "ALERTD_ALERTNAME",
    "ALERTD_SEVERITY",
    "ALERTD_SOURCE",
    "ALERTD_RUN",
    "ALERTD_SUMMARY",
)
"""The variables set for every run (empty where the notification has no such value)."""


def alertd_env(notifier: str, n: Notification, body: dict[str, Any]) -> dict[str, str]:
    """The `ALERTD_*` variables for `n`. The rule, severity, source, run and summary are the first alert's
    of the body (Alertmanager's order); `ALERTD_KEY` is the idempotency key."""
    alerts: list[dict[str, Any]] = body["alerts"]
    first = alerts[0] if alerts else {}
    labels: dict[str, str] = first.get("labels", {})
    notes: dict[str, str] = first.get("annotations", {})
    firing = sum(1 for a in alerts if a["status"] == "firing")
    rule = str(labels.get("alertname", ""))
    env = {
        "ALERTD_NOTIFIER": notifier,
        "ALERTD_RECEIVER": n.receiver,
        "ALERTD_STATUS": n.status,
        "ALERTD_GROUP_KEY": n.group_key,
        "ALERTD_KEY": n.key,
        "ALERTD_ALERT_COUNT": str(len(n.alerts)),
        "ALERTD_FIRING_COUNT": str(firing),
        "ALERTD_RULE": rule,
        "ALERTD_ALERTNAME": rule,
        "ALERTD_SEVERITY": str(labels.get("severity", "")),
        "ALERTD_SOURCE": str(labels.get("source", "")),
        "ALERTD_RUN": str(labels.get("run", "")),
        "ALERTD_SUMMARY": str(notes.get("summary", "")),
    }
    return {k: v.replace("\0", "")[:ENV_VALUE_CAP] for k, v in env.items()}


class ExecNotifier:
    """Runs `cfg.command` once per notification; see the module's docstring for the contract."""

    def __init__(self, name: str, cfg: ExecConfig) -> None:
        self.name = name
        self.cfg = cfg
        self._secrets = {k: v.get_secret_value() for k, v in cfg.env.items()}
        self._scrub = Scrubber(self._secrets.values())
        self._running: set[asyncio.subprocess.Process] = set()
        self._closing = False
        self._keep = OUTPUT_CAP + max((len(v.encode()) for v in self._secrets.values()), default=0)
        """Bytes read ahead of the cap, so a secret across the cut is still whole when it is replaced."""

    @property
    def target(self) -> str:
        """The program's path, safe to show (its arguments are configuration, not secrets, but are left out)."""
        return self.cfg.command[0]

    def body(self, notification: Notification) -> dict[str, Any]:
        """The JSON written to the program's stdin: the generic webhook's body."""
        return generic_body(notification, Options())

    def environment(self, notification: Notification) -> dict[str, str]:
        """The program's whole environment for `notification` (it holds the notifier's secrets)."""
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.update(alertd_env(self.name, notification, self.body(notification)))
        env.update(self._secrets)
        return env

    async def send(self, notification: Notification) -> None:
        """Run the program once; return when it exited 0, else raise NotifyError."""
        body = json.dumps(self.body(notification), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        procs: list[asyncio.subprocess.Process] = []

        def started(proc: asyncio.subprocess.Process) -> None:
            procs.append(proc)
            self._running.add(proc)

        try:
            done = await run_program(
                self.cfg.command,
                timeout=self.cfg.timeout,
                grace=self.cfg.grace,
                max_stdout=self._keep,
                max_stderr=self._keep,
                env=self.environment(notification),
                data=body.encode(),
                started=started,
            )
        except OSError as e:
            raise self._error(f"cannot start: {e.strerror or e}", recoverable=False) from None
        finally:
            self._running.difference_update(procs)
        code, timed_out = done.returncode, done.timed_out
        stdout, stderr = self._text(done.stdout), self._text(done.stderr)
        if code == 0 and not timed_out:
            log.debug("exec %s: delivered %s; stdout %r; stderr %r", self.name, notification.key, stdout, stderr)
            return
        if timed_out:
            why, recoverable = f"no exit within {self.cfg.timeout:g}s: process group killed", True
        elif code < 0 and self._closing:
            why, recoverable = f"killed by {signal_name(-code)}: the notifier was closed (shutdown or reload)", True
        elif code < 0:
            why, recoverable = f"killed by {signal_name(-code)}", False
        elif code in self.cfg.retry_codes:
            why, recoverable = f"exit status {code} (retryable)", True
        else:
            why, recoverable = f"exit status {code}", False
        log.warning("exec %s: %s for %s; stdout %r; stderr %r", self.name, why, notification.key, stdout, stderr)
        tail = stderr.strip()[-ERROR_TAIL:]
        raise self._error(why + (f"; stderr: {tail}" if tail else ""), recoverable=recoverable)

    def _text(self, data: bytes) -> str:
        """The output as text, secrets replaced, then cut to OUTPUT_CAP characters."""
        return self._scrub(data.decode("utf-8", errors="replace"))[:OUTPUT_CAP]

    def _error(self, message: str, *, recoverable: bool) -> NotifyError:
        return NotifyError(self._scrub(f"exec {self.name} ({self.target}): {message}"), recoverable=recoverable)

    async def aclose(self) -> None:
        """Kill every program still running (their `send` then fails as recoverable: retried after a restart)."""
        self._closing = True
        for proc in list(self._running):
            if proc.returncode is None:
                killpg(proc.pid, signal.SIGKILL)
