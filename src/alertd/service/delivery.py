"""The delivery side of the service: the dispatcher built from the configuration in force, the task that sends
what the outbox holds as soon as it is due (and runs the group timers), and what alertd exec does as its child
ends (wait for the actions under way, flush the groups, wait for the deliveries)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from alertd.actions.config import action_receivers
from alertd.config import Config
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox
from alertd.dispatch.silences import SilenceStore
from alertd.model import Alert
from alertd.notify.base import Draining, Notifier
from alertd.service.engine import log


def dispatch_options(config: Config, notifiers: Mapping[str, Notifier]) -> dict[str, Any]:
    """What the dispatcher takes from a configuration (at start and at every reload)."""
    return {
        "route": config.route.to_route(),
        "inhibit_rules": [r.to_rule() for r in config.inhibit_rules],
        "notifiers": notifiers,
        "immediate": action_receivers(config.notifiers),
        "max_notifications": config.max_notifications_per_flush,
    }


class Deliveries:
    """The dispatcher and its delivery loop. `alerts()`: the pending and firing alerts by fingerprint, for the
    group timers' plans. `wake()` tells the loop that something may be due now."""

    def __init__(self, alerts: Callable[[], dict[str, Alert]], now: Callable[[], float]) -> None:
        self._alerts = alerts
        self._now = now
        self.dispatcher: Dispatcher | None = None
        self._wake = asyncio.Event()

    def build(
        self, config: Config, notifiers: Mapping[str, Notifier], outbox: Outbox, silences: SilenceStore
    ) -> Dispatcher:
        """The dispatcher for `config` (the outbox and silences of the state directory)."""
        options = dispatch_options(config, notifiers) | {"outbox": outbox, "silences": silences}
        self.dispatcher = Dispatcher(max_retry_after=config.max_retry_after, **options)
        return self.dispatcher

    def reconfigure(self, config: Config, notifiers: Mapping[str, Notifier]) -> None:
        """A reload's routes, inhibitions and notifiers."""
        self._live().reconfigure(**dispatch_options(config, notifiers))

    def _live(self) -> Dispatcher:
        assert self.dispatcher is not None, "the dispatcher is built when the service opens"
        return self.dispatcher

    def wake(self) -> None:
        """Look at the outbox and the group timers now."""
        self._wake.set()

    async def loop(self, stop: asyncio.Event) -> None:
        """Deliver what the outbox holds as soon as it is due; run group timers when they expire; until `stop`."""
        dispatcher = self._live()
        while not stop.is_set():
            self._wake.clear()
            now = self._now()
            if dispatcher.due(now):  # a group timer (not a delivery alone: no plan, no look at every alert for it)
                dispatcher.submit((), self._alerts(), now)
            try:
                await dispatcher.deliver_due(now)
            except Exception:  # Delivery errors are the pipeline's; this loop must survive anything.
                log.exception("delivery loop")
            wake = dispatcher.next_wakeup()
            timeout = None if wake is None else max(0.05, wake - self._now())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def prune(self) -> None:
        """Forget old log entries of resolved groups and long-expired silences."""
        if self.dispatcher is not None:
            self.dispatcher.prune(self._now())

    def flush_groups(self) -> None:
        """Send what every open group holds now, whatever its timers (sqlite3.Error: the state can't be written)."""
        self._live().flush_groups(self._alerts(), self._now())
        self._wake.set()

    async def drain(self, notifiers: Iterable[Notifier], timeout: float) -> None:
        """Wait (at most `timeout` s) for the actions under way (a kill reports how its process ended), then until
        nothing is left to deliver now or within the next second."""
        dispatcher = self._live()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for notifier in notifiers:
            if isinstance(notifier, Draining):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(notifier.wait_idle(), max(0.0, deadline - loop.time()))
        while loop.time() < deadline:
            now = self._now()
            wake = dispatcher.next_wakeup()
            if dispatcher.outbox.next_due() is None and (wake is None or wake > now + 1.0):
                return
            self._wake.set()
            await asyncio.sleep(0.05)
