"""One stream of log lines (a file, or a child's output) turned into samples: its series and parse state.

A line with torchrun's rank prefix (`[default1]:`, `[rank1]:`; `alertd.sources.textlog.parse.split_rank`) is
parsed without it, with its rank's own state, and its samples carry the label `rank`.

`parse` takes a batch of lines: the everyday ones through `alertd.sources.textlog.fast` (a tight loop over the
batch), the others, and every line of a parser with user patterns or events, through `parse_line`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.textlog.fast import parse_batch
from alertd.sources.textlog.parse import FileState, LineParser, Parsed, series_name, split_rank

log = logging.getLogger(__name__)

EVENT = "log.event"
MAX_SERIES = 1000
"""Distinct metric names one stream may create; a log printing ever new keys can't exhaust memory."""


class LogStream:
    """The labels, series keys and parse state of one log (`name` is how warnings call it)."""

    __slots__ = ("keys", "known", "labels", "lines", "matched", "name", "overflow", "rank_known", "state")

    def __init__(self, name: str, labels: Mapping[str, str]) -> None:
        self.name = name
        self.labels = make_labels(labels)
        self.state = FileState()
        self.keys: dict[str, SeriesKey] = {}
        self.known: dict[str, Any] = {}
        """For the fast path (`alertd.sources.textlog.fast`): the series of metric names, and the step keys."""
        self.rank_known: dict[str, dict[str, Any]] = {}
        """The same for the lines of each rank (torchrun's prefix; at most MAX_RANKS, as the state's ranks)."""
        self.overflow = False
        self.lines = 0
        """Lines parsed (since this stream began: a restarted service counts again)."""
        self.matched = 0
        """Of those, lines that gave values or events."""

    def key(self, metric: str, extra: tuple[tuple[str, str], ...] = ()) -> SeriesKey | None:
        """The series of `metric` in this stream; None past MAX_SERIES names (warned about once)."""
        name = series_name(metric, extra)
        key = self.keys.get(name)
        if key is None:
            if len(self.keys) >= MAX_SERIES:
                if not self.overflow:
                    log.warning("%s: more than %d metric names; new ones are dropped", self.name, MAX_SERIES)
                    self.overflow = True
                return None
            labels = make_labels((*self.labels, *extra)) if extra else self.labels
            key = self.keys[name] = SeriesKey(metric, labels)
        return key

    def parse(self, parser: LineParser, lines: Sequence[str], now: float, out: list[Sample]) -> None:
        """Append the samples of `lines` to `out`: values, events, and a fatal event's crash.

        With the built-in shapes alone (no user patterns or events), through the fast path
        (`alertd.sources.textlog.fast`), which gives what `parse_line` gives for each line in turn."""
        self.lines += len(lines)
        if parser.builtin and not parser.patterns and not parser.events:
            parse_batch(self, parser, lines, now, out)
            return
        for line in lines:
            self.parse_line(parser, line, now, out)

    def parse_line(self, parser: LineParser, line: str, now: float, out: list[Sample]) -> None:
        """Append the samples of one line to `out`, on its own: the reference the fast path keeps to."""
        rank, text = split_rank(line)
        state = self.state if rank is None else self.state.of_rank(rank)
        if state is None:  # past MAX_RANKS ranks: parsed as the file's own
            rank, state = None, self.state
        p = parser.parse(text, state)
        if p.values or p.events:
            self.matched += 1
            self._samples(p, now, out, state, (("rank", rank),) if rank is not None else ())

    def _samples(
        self, p: Parsed, now: float, out: list[Sample], state: FileState, extra: tuple[tuple[str, str], ...]
    ) -> None:
        t = p.time if p.time is not None else now
        keys, step = self.keys, p.step
        for metric, value in p.values:
            key = keys.get(metric) if not extra else None  # the usual: a known metric of the file's own lines
            if key is None:
                key = self.key(metric, extra)
                if key is None:
                    continue
            out.append(Sample(key, t, step, value))
        if not p.events:
            return
        step = p.step if p.step is not None else state.last_step
        for ev in p.events:
            key = self.key(EVENT, (("event", ev.name), *extra))
            if key is not None:
                out.append(Sample(key, t, step, 1.0))
        if any(ev.fatal for ev in p.events):
            for metric in ("run.crashed", "run.finished"):
                key = self.key(metric, extra)
                if key is not None:
                    out.append(Sample(key, t, step, 1.0))
