"""A thread pool for the event loop's blocking work whose stuck threads never hold the process.

`asyncio.to_thread` runs on the loop's default executor, a `ThreadPoolExecutor` whose threads are joined
when the loop closes and again when the interpreter exits: one thread stuck in a read (a FIFO, a hung
network file system) keeps a stopping alertd alive forever. This pool's threads are daemon threads, and
its `shutdown` never waits for them, so SIGTERM ends the process however the sources behave. A thread is
started for each job that finds no idle one, up to `max_workers`; idle threads wait for the next job.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_STOP = None


class DaemonExecutor(ThreadPoolExecutor):
    """An executor of daemon threads, never joined (a `ThreadPoolExecutor` only because asyncio's
    `set_default_executor` insists; none of its threads or queues are used)."""

    def __init__(self, max_workers: int = 64, name: str = "alertd-io") -> None:
        super().__init__(max_workers=1)
        self.max_workers = max_workers
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._idle = 0
        self._shut = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run `fn(*args, **kwargs)` in a pool thread."""
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                self._idle -= 1
            elif self._started < self.max_workers:
                self._started += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._started}", daemon=True).start()
        self._jobs.put((future, lambda: fn(*args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more jobs; idle threads end. Never waits for a running job, whatever `wait` says."""
        with self._lock:
            self._shut = True
            started = self._started
        for _ in range(started):
            self._jobs.put(_STOP)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            future, call = job
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._lock:
                self._idle += 1
