"""A stop request from alertd, as a training loop sees it; framework-free.

Two ways to ask:

- the stop file: alertd's `stop_file` notifier creates it (atomically, with a small JSON body naming the
  rule). `poll()` looks for it with one `os.path.exists`, cheap enough for every step. Once the request is
  honoured, `consume()` renames it to `<path>.done`, so a run resumed in the same directory does not stop
  again at its first step.
- a signal: `install()` sets handlers for SIGINT and SIGUSR1 (in the main thread only; Python runs signal
  handlers there) that only note the request. alertd's `kill` notifier sends SIGINT first. A SECOND
  SIGINT gives the previous handler its due at once (Python's default raises KeyboardInterrupt), so a
  person at the terminal can still abort a step that takes too long. A SIGUSR1 handler someone else set
  (Lightning's SLURM requeue, for one) is left alone. `uninstall()` puts the previous handlers back, unless
  someone replaced ours meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

log = logging.getLogger("alertd.integrations")

STOP_FILE_ENV = "ALERTD_STOP_FILE"
DEFAULT_STOP_NAME = "ALERTD_STOP"
DEFAULT_SIGNALS = ("SIGINT", "SIGUSR1")
STOP_FILE = "stop_file"
"""The `reason` of a request made by the stop file; a signal's is its name (SIGINT, SIGUSR1)."""
COMMAND = "command"
"""The `reason` of a request made by alertd's `stop` command (`alertd.integrations.commands`)."""

_Handler = Callable[[int, FrameType | None], Any] | int | None


class StopRequest:
    """Whether alertd asked this run to stop, and how."""

    def __init__(self, stop_file: str | None, signals: Iterable[str] = DEFAULT_SIGNALS) -> None:
        self.stop_file = stop_file
        self.signals = tuple(signals)
        self.reason: str | None = None
        self._previous: dict[int, _Handler] = {}
        self._sigints = 0
        self._handler = self._on_signal  # one bound method, so that `uninstall` can recognise it

    def install(self) -> None:
        """Set the signal handlers (main thread only; elsewhere signals are not handled, and that is logged)."""
        if not self.signals:
            return
        if threading.current_thread() is not threading.main_thread():
            log.info("alertd: not in the main thread: stop requests by signal are not handled, only the stop file")
            return
        for name in self.signals:
            signum = getattr(signal, name, None)
            if not isinstance(signum, int) or signum in self._previous:
                continue
            previous = signal.getsignal(signum)
            if signum != signal.SIGINT and callable(previous):
                log.info("alertd: %s already has a handler: left to it, not a stop request", name)
                continue
            signal.signal(signum, self._handler)
            self._previous[signum] = previous

    def uninstall(self) -> None:
        """Put back the handlers that were there before `install()`."""
        for signum in list(self._previous):
            self._restore(signum)

    def poll(self) -> str | None:
        """The reason of a pending request (the stop file is looked for now), or None."""
        if self.reason is None and self.stop_file and os.path.exists(self.stop_file):
            self.reason = STOP_FILE
        return self.reason

    def describe(self) -> str:
        """What asked to stop, in words: the signal, or the stop file and the alert its body names."""
        if self.reason is None:
            return "nothing (no stop request)"
        if self.reason == COMMAND:
            return "alertd's stop command"
        if self.reason != STOP_FILE:
            return f"signal {self.reason}"
        text = f"stop file {self.stop_file}"
        about = self.file_body()
        summary = about.get("summary") or about.get("rule")
        return f"{text} ({summary})" if summary else text

    def file_body(self) -> dict[str, Any]:
        """The stop file's JSON body (alertd's notifier writes `rule`, `summary`, ...); {} if none or unreadable."""
        if not self.stop_file:
            return {}
        try:
            with open(self.stop_file, encoding="utf-8", errors="replace") as f:
                body = json.loads(f.read(65536))
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def consume(self) -> None:
        """A request by stop file was honoured: rename the file to `<path>.done` (gone already: fine)."""
        if self.reason != STOP_FILE or not self.stop_file:
            return
        try:
            os.replace(self.stop_file, self.stop_file + ".done")
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("alertd: can't rename the stop file %s: %s", self.stop_file, e)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self._sigints += 1
            if self._sigints > 1:
                previous = self._previous.get(signum)
                self._restore(signum)
                _call(previous, signum, frame)
                return
        if self.reason is None:
            self.reason = signal.Signals(signum).name

    def _restore(self, signum: int) -> None:
        previous = self._previous.pop(signum, None)
        try:
            if signal.getsignal(signum) == self._handler:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        except ValueError:  # not the main thread: nothing can be changed from here
            log.debug("alertd: can't restore the handler of signal %d outside the main thread", signum)


def _call(handler: _Handler, signum: int, frame: FrameType | None) -> None:
    """Do what `handler` would have done with the signal."""
    if callable(handler):
        handler(signum, frame)  # Python's default_int_handler raises KeyboardInterrupt here
    elif handler != signal.SIG_IGN:  # SIG_DFL, or a handler not set from Python: the default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
