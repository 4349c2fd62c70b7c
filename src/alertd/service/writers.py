"""The writer checks: which process writes each TensorBoard run, verified through /proc (`alertd.runs.writers`),
and what that says of the runs (alive, gone, how it ended), as derived samples for the run tracker."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

from alertd.model import Sample
from alertd.runs.tracker import RunTracker, Writer
from alertd.runs.writers import WriterClaim, WriterRegistry
from alertd.service.engine import log
from alertd.sources.base import Source
from alertd.sources.tensorboard import TensorBoardSource

WRITER_CHECK_EVERY = 2.0
"""Seconds between two looks at the TensorBoard writers' processes (new files are looked at at once)."""


class WriterChecks:
    """Verifies the writers the TensorBoard files name, now and then. `busy(name)`: whether a poll of that source
    runs (its claims are then those of its last quiet moment)."""

    def __init__(self, busy: Callable[[str], bool], registry: WriterRegistry | None = None) -> None:
        self.registry = registry or WriterRegistry()
        self._busy = busy
        self._generations: tuple[tuple[str, int], ...] = ()
        self._checked = float("-inf")
        self._claims: dict[str, list[WriterClaim]] = {}
        self._told: dict[int, WriterClaim] = {}
        """Claims (by object) whose process was gone when their run was told, their files unchanged since: passed
        over (their runs know)."""
        self._listed: tuple[tuple[int, ...], list[WriterClaim]] = ((), [])
        self._statuses: dict[tuple[int, int], int | None] = {}
        """Exited writers whose end is known for good, by (pid, start time): the exit status read from the zombie,
        or None once the process was reaped without one; /proc is not read for them again."""

    async def check(
        self, sources: Mapping[str, Source], runs: RunTracker, now: float, *, only_new: bool = False
    ) -> list[Sample]:
        """Verify the writers (in a thread: /proc) and tell the runs what lives; the samples that says.

        On the tick, at most every WRITER_CHECK_EVERY seconds; after a poll (`only_new`), only when the
        poll found files not seen before, so a NaN in a new file finds its writer verified.
        """
        tb = [(name, s) for name, s in sources.items() if isinstance(s, TensorBoardSource)]
        generations = tuple((name, s.generation) for name, s in tb)  # files came or went
        new = generations != self._generations
        if (only_new and not new) or (not new and now - self._checked < WRITER_CHECK_EVERY):
            return []
        lists = [self._claims_of(name, s) for name, s in tb]
        ids = tuple(id(x) for x in lists)
        if ids != self._listed[0]:  # a source's claims changed: one list again (the same list object otherwise)
            self._listed = (ids, [c for x in lists for c in x])
        claims = self._listed[1]
        self._generations, self._checked = generations, now
        if not claims:
            return []
        changes, unverified, statuses = await asyncio.to_thread(self._check, claims, now)
        for line in changes:
            log.info("%s", line)
        derived: list[Sample] = []
        for w in self.registry.writers():
            status = statuses.get((w.pid, w.start_ticks))
            writer = Writer(w.host, w.pid, True, w.alive, w.holding, status, w.how)
            if runs.writer_of(w.source, w.run) != writer:  # told only what changed
                derived += runs.writer(w.source, w.run, writer, now)
        by_run: dict[tuple[str, str], tuple[WriterClaim, bool]] = {}
        for c, alive in unverified:  # a run's writer lives if any of its files' named process does
            if alive or (c.source, c.run) not in by_run:
                by_run[(c.source, c.run)] = (c, alive)
        for c, alive in by_run.values():
            writer = Writer(c.host, c.pid, False, alive, False)
            if runs.writer_of(c.source, c.run) != writer:
                derived += runs.writer(c.source, c.run, writer, now)
        return derived

    def _claims_of(self, name: str, source: TensorBoardSource) -> list[WriterClaim]:
        """The writer claims of a TensorBoard source: asked while no poll of it runs (it holds its lock
        then, maybe for long), else those of its last quiet moment."""
        if not self._busy(name):
            self._claims[name] = source.writer_claims()
        return self._claims.get(name, [])

    def _check(
        self, claims: list[WriterClaim], now: float
    ) -> tuple[list[str], list[tuple[WriterClaim, bool]], dict[tuple[int, int], int]]:
        """The registry's check; whether each unverified claim's process lives (a zombie does not: it has
        exited, only its parent has not reaped it yet); the exit status of each verified writer that is gone
        but still a zombie, by (pid, start time): how its run ended."""
        registry = self.registry
        procfs = registry.procfs
        changes = registry.check(claims, now)
        writers = registry.writers()
        verified = {(w.source, w.run) for w in writers}
        unverified = []
        told = self._told
        for c in claims:
            if told.get(id(c)) is c:
                continue
            if (c.source, c.run) not in verified and c.host == registry.hostname:
                if registry.settled_gone(c):  # gone at an earlier check, its file unchanged since: no /proc read
                    unverified.append((c, False))
                    told[id(c)] = c
                    continue
                info = procfs.read(c.pid)
                unverified.append((c, info is not None and not info.zombie))
        statuses: dict[tuple[int, int], int] = {}
        known = self._statuses
        for w in writers:
            key = (w.pid, w.start_ticks)
            if w.alive or key in statuses:
                continue
            if key in known:
                final = known[key]
                if final is not None:
                    statuses[key] = final
                continue
            info = procfs.read(w.pid)
            same = info is not None and info.zombie and info.start_ticks == w.start_ticks
            if same and info is not None and info.exit_code is not None:
                statuses[key] = known[key] = os.waitstatus_to_exitcode(info.exit_code)
            elif info is None or info.start_ticks != w.start_ticks:
                known[key] = None  # reaped (or the pid reused): no status will ever be read
        if len(told) > 2 * len(claims) + 1024:
            listed = {id(c) for c in claims}
            self._told = {k: v for k, v in told.items() if k in listed}
        if len(known) > 4 * len(writers) + 1024:
            alive = {(w.pid, w.start_ticks) for w in writers}
            self._statuses = {k: v for k, v in known.items() if k in alive}
        return changes, unverified, statuses
