"""`LogStream.parse`'s fast path: the everyday lines of a batch parsed in one tight loop, with the very samples,
events and state that `LineParser.parse` and `LogStream.parse_line` give line by line (the oracle: the tests hold
the two to each other on every shape of line).

It is taken for a parser of the built-in shapes with no user patterns and no user events (otherwise each line
goes the line by line way). A batch is read in windows of WINDOW lines; per window, one search of the window's
text for each built-in event's hint and for ANSI escapes (`marked`) picks out the lines that go the line by line
way; the others go through `run_lines`, which hands a line over to `parse_line` (the same state, the same list of
samples) when it is any of:

- in a traceback (the file's own state is in one), a progress bar's state (`\\r`), a line with a rank prefix;
- a JSON object (not HF's Python dict), `name value` pairs (no `key=value`/`key: value` pair, a number at the
  end), more than MAX_VALUES pairs;
- a pair whose value Python's float() refuses (Lightning's `nan.0`), or a metric the stream has no series of
  yet (so that series are made, and MAX_SERIES warned about, exactly as line by line).

Everything else `run_lines` does itself, as `LineParser.parse` would: the leading time, the pairs of an HF dict or of
`key=value`/`key: value` (`_PAIR_FAST`, the same matches as `parse._PAIR`), the step (the first integral value
of a step key; one after the values still gives them their step), the counter, one `Sample` per value. What
it keeps between batches is the stream's `known` (bounded by MAX_KNOWN): the series of each metric name and
which names are step keys, both fixed once seen (`rank_known`: the same for each rank's lines).

`run` gives those lines to the C loop (`_native.c`, built where a compiler is found), which takes the lines it
can give exactly this for (ASCII text; torchrun's rank-prefixed lines too, one rank's state at a time) and hands
each other line to `run_lines`, the loop described above: `run_lines` is the C loop's fallback and oracle.
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import add
from typing import TYPE_CHECKING, Any

from alertd.model import Sample, SeriesKey
from alertd.sources.textlog.parse import (
    _BUILTIN_HINTS,
    _DICT_PAIR,
    _END,
    _NUM,
    _NUMBER_ENDS,
    _TIME,
    IGNORED_KEYS,
    MAX_VALUES,
    STEP_KEYS,
    FileState,
    LineParser,
    _epoch,
    leading_time,
    series_name,
    split_rank,
)

if TYPE_CHECKING:
    from types import ModuleType

    from alertd.sources.textlog.stream import LogStream

_native: ModuleType | None
try:  # built by `pip install` where a C compiler is found (pyproject.toml's ext-modules)
    from alertd.sources.textlog import _native
except ImportError:  # pragma: no cover - the install found no compiler: the Python loop alone
    _native = None

WINDOW = 4096
"""Lines whose text is searched at once for hints (a window's text is made, searched and dropped)."""
MAX_KNOWN = 2048
"""Names a stream's `known` holds at most (metrics are at most MAX_SERIES; step keys' spellings the rest)."""

_PAIR_FAST = re.compile(rf"([A-Za-z_](?<![\w./-][\s\S])[\w./-]*+)(?:\s*+=|:)\s*+({_NUM}){_END}")
r"""`parse._PAIR` with the key's first letter first (`re` then skips to letters at C speed): the same matches,
as `(?<![\w./-])[A-Za-z_]` and `[A-Za-z_](?<![\w./-].)` hold at the same places (and neither looks before
the first letter of the text)."""
_PLAIN_FIRST = frozenset(c for c in map(chr, range(128)) if not (c.isspace() or c.isdigit() or c == "["))
"""First characters of a line with no leading time and no rank prefix, nor a progress bar's `\\r`."""
_DIGITS = frozenset("0123456789")
_WITH_HINTS = ("\x1b", *_BUILTIN_HINTS)
_ANSI_ONLY = ("\x1b",)
_BIG = 2**62


class _Mark:
    """What a name is, when not a metric with a series (`STEP`, `IGNORED`, `DROPPED`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


STEP = _Mark("step")
"""A step key (`step`, `global_step`, `iter`, `iteration`, any case)."""
IGNORED = _Mark("ignored")
"""Not a value (`v_num`)."""
DROPPED = _Mark("dropped")
"""A value with no series: the stream has MAX_SERIES names already (and has warned)."""


def marked(lines: Sequence[str], hints: bool) -> list[int]:
    """The indices of the lines that hold an ANSI escape or (`hints`) a built-in event's hint, in order."""
    blob = "\n".join(lines)
    ends: list[int] | None = None
    out: set[int] = set()
    for needle in _WITH_HINTS if hints else _ANSI_ONLY:
        p = blob.find(needle)
        if p < 0:
            continue
        if ends is None:
            ends = list(map(add, accumulate(map(len, lines)), range(len(lines))))
        while p >= 0:
            i = bisect_left(ends, p)
            out.add(i)
            p = blob.find(needle, ends[i] + 1)
    return sorted(out)


def classify(stream: LogStream, key: str, rank: str | None = None) -> SeriesKey | _Mark | None:
    """What `key` is in `stream` (on `rank`'s lines: torchrun's prefix, its series labelled `rank`): its
    series, or a `_Mark`; None: a metric with no series yet (the line goes the line by line way, which makes
    it). Step keys and series are kept in `stream.known` (`stream.rank_known[rank]`)."""
    if key.lower() in STEP_KEYS:
        kind: SeriesKey | _Mark | None = STEP
    elif key in IGNORED_KEYS:
        return IGNORED
    else:
        kind = stream.keys.get(key if rank is None else series_name(key, (("rank", rank),)))
        if kind is None:
            return DROPPED if stream.overflow else None
    known = stream.known if rank is None else stream.rank_known[rank]
    if len(known) < MAX_KNOWN:
        known[key] = kind
    return kind


def slow(
    stream: LogStream,
    parser: LineParser,
    line: str,
    now: float,
    out: list[Sample],
    counter: int,
    last_step: int | None,
    last_time: float | None,
) -> tuple[int, int | None, float | None, bool]:
    """`line` the line by line way, from and back to `run`'s copy of the state (see `run`)."""
    state = stream.state
    state.counter, state.last_step, state.last_time = counter, last_step, last_time
    stream.parse_line(parser, line, now, out)
    return state.counter, state.last_step, state.last_time, state.in_traceback


def run(stream: LogStream, parser: LineParser, lines: Sequence[str], now: float, out: list[Sample]) -> None:
    """Append the samples of `lines` (none holding a hint or an ANSI escape) to `out`, updating the stream: the
    C loop (`_native.run`) for the lines it takes, `run_lines` for each line it hands back (see `_native.c`:
    non-ASCII text, a new metric, `name value` pairs, JSON, ...) and for the lines of a traceback. The C loop
    reads the lines of one state at a time (the file's own, or a rank's: torchrun's prefix); at a line of
    another, it returns and is called again with that one's. Without the C module, `run_lines` for all.
    """
    native = _native
    if native is None:
        run_lines(stream, parser, lines, now, out)
        return
    rank: str | None = None
    contexts: dict[str | None, Context] = {}
    state, known, named = contexts[None] = _file_context(stream)
    i, n = 0, len(lines)
    while i < n:
        if not state.in_traceback:
            i, state.counter, state.last_step, state.last_time, matched, why, line_rank = native.run(
                lines, i, state.counter, state.last_step, state.last_time, known, named, rank, now, out
            )
            stream.matched += matched
            if why == GO_ON:
                continue  # the end, or a pause after a megabyte of text (other threads take the GIL meanwhile)
            if why == OTHER_RANK:
                context = contexts.get(line_rank)
                if context is None:  # a rank not met in this call (the file's own context is always there)
                    assert line_rank is not None
                    context = _rank_context(stream, line_rank)
                    if context is None:  # past MAX_RANKS ranks: the line by line way (as the file's own)
                        run_lines(stream, parser, lines[i : i + 1], now, out)
                        i += 1
                        continue
                    contexts[line_rank] = context
                rank, (state, known, named) = line_rank, context
                continue
        elif rank is not None:  # a rank's traceback: the lines after it may be another's (the C loop tells)
            rank, (state, known, named) = None, contexts[None]
        run_lines(stream, parser, lines[i : i + 1], now, out)
        i += 1


GO_ON, HANDED_BACK, OTHER_RANK = 0, 1, 2
"""Why `_native.run` returned (its `why`)."""


Context = tuple[FileState, dict[str, Any], Callable[[str], object]]
"""The state, the names met and the classifier of one kind of line (the file's own, or a rank's)."""


def _file_context(stream: LogStream) -> Context:
    """The file's own lines' `Context`."""
    return stream.state, stream.known, functools.partial(classify, stream)


def _rank_context(stream: LogStream, rank: str) -> Context | None:
    """The `Context` of `rank`'s lines; None past MAX_RANKS ranks."""
    state = stream.state.of_rank(rank)
    if state is None:
        return None
    return state, stream.rank_known.setdefault(rank, {}), functools.partial(classify, stream, rank=rank)


def run_lines(stream: LogStream, parser: LineParser, lines: Sequence[str], now: float, out: list[Sample]) -> None:  # noqa: C901
    """`run` in Python: the fallback without the C module, and its oracle (the tests hold the two to each other).

    One flat loop on purpose (a function call per line or per pair would cost more than the rest): the
    state's counter, last step and time are kept in locals and written back at the end (and around each line
    handed to `slow`). A line's samples are appended as its pairs are read; should a pair turn out to need
    the line by line way, they are taken back first (nothing else of the state has moved by then: the
    counter and the last step are set after the last pair; the line's time is set again the same way).
    """
    state = stream.state
    known_get = stream.known.get
    append = out.append
    new = tuple.__new__
    pair_findall = _PAIR_FAST.findall
    dict_findall = _DICT_PAIR.findall
    time_match = _TIME.match
    isfinite = math.isfinite
    plain, digits, number_ends = _PLAIN_FIRST, _DIGITS, _NUMBER_ENDS
    counter, last_step, last_time = state.counter, state.last_step, state.last_time
    matched = 0
    synced = False
    tb = state.in_traceback
    try:
        for line in lines:
            if not tb:
                c = line[:1]
                pos = 0
                if c not in plain:
                    if c in digits:
                        m = time_match(line)
                        if m is not None:
                            pos = 19  # no pair starts inside the date and time: their letters follow digits
                            frac, zone = m.group(7, 8)
                            whole = _epoch(line[:10] + "T" + line[11:19], zone)
                            if whole is not None:
                                last_time = whole + (int(frac) / 10 ** len(frac) if frac else 0.0)
                    elif c == "\r" or (c == "[" and "]:" in line and split_rank(line)[0] is not None):
                        pos = -1  # a bar's state, a rank's line: the line by line way
                    elif c != "[" or line[1:2].isdigit():
                        t = leading_time(line)
                        if t is not None:
                            last_time = t
                start = line.find("{") if pos >= 0 else -2
                if start == -1:
                    found = pair_findall(line, pos)
                elif start >= 0:
                    end = line.rfind("}") + 1
                    if end <= start + 1:
                        found = pair_findall(line, pos)
                    elif line[start + 1 : start + 2] == "'":
                        found = dict_findall(line, start, end) or pair_findall(line, pos)
                    else:
                        found = None  # JSON: the line by line way
                else:
                    found = None
                if found and len(found) <= MAX_VALUES:
                    s: int | None = None
                    step: int | None = None
                    for k, v in found:
                        try:
                            x = float(v)
                        except ValueError:
                            break  # `nan.0`, or no number Python reads
                        kind = known_get(k)
                        if kind is None:
                            kind = classify(stream, k)
                            if kind is None:
                                break  # a new metric: its series is made the line by line way
                            if kind is IGNORED:
                                continue
                            if kind is DROPPED:  # a value past MAX_SERIES names: counted, no sample
                                if s is None:
                                    s = step if step is not None else counter + 1 if last_step is None else last_step
                                    t = last_time if last_time is not None else now
                                    mark = len(out)
                                continue
                        if kind is STEP:
                            if step is None and isfinite(x) and x == int(x) and abs(x) < _BIG:
                                step = int(x)
                                if s is not None:  # after values: they take it too
                                    s = step
                                    out[mark:] = [new(Sample, (o[0], o[1], step, o[3])) for o in out[mark:]]
                            continue
                        if s is None:  # the line's first value: its step and time
                            s = step if step is not None else counter + 1 if last_step is None else last_step
                            t = last_time if last_time is not None else now
                            mark = len(out)
                        append(new(Sample, (kind, t, s, x)))
                    else:
                        if step is not None:
                            last_step = step
                        if s is not None:
                            counter += 1
                            matched += 1
                        continue
                    if s is not None:
                        del out[mark:]
                elif found is not None and not found and line.rstrip(" \t,;|")[-1:] not in number_ends:
                    continue  # no pairs, and no number at the end for `name value` pairs: nothing
            synced = True  # from here until `slow` returns, `state` is the state (should the line raise)
            counter, last_step, last_time, tb = slow(stream, parser, line, now, out, counter, last_step, last_time)
            synced = False
    finally:
        if not synced:
            state.counter, state.last_step, state.last_time = counter, last_step, last_time
        stream.matched += matched


if _native is not None:
    _native.setup(Sample, STEP, IGNORED, DROPPED, IGNORED_KEYS, _epoch, MAX_VALUES)


def parse_batch(stream: LogStream, parser: LineParser, lines: Sequence[str], now: float, out: list[Sample]) -> None:
    """Append the samples of `lines` to `out`, as `stream.parse_line` would one line at a time."""
    for a in range(0, len(lines), WINDOW):
        window = lines[a : a + WINDOW]
        start = 0
        for i in marked(window, parser.builtin_events):
            if i > start:
                run(stream, parser, window[start:i], now, out)
            stream.parse_line(parser, window[i], now, out)
            start = i + 1
        if start < len(window):
            run(stream, parser, window[start:] if start else window, now, out)
