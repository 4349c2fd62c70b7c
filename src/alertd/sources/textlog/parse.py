"""Lines of a training log -> values, a step, a time and events. Pure: no I/O, no clock.

Built-in shapes, found without configuration, in this order of preference:
- a JSON object or a Python dict on the line (HF Trainer prints `{'loss': 2.31, 'grad_norm': 1.2,
  'learning_rate': 3e-05, 'epoch': 0.5}`): its numeric entries (nested objects give `outer/inner`);
- otherwise `key=value` pairs (`step=120 loss=2.3456 lr=3e-4`, Lightning's progress-bar postfix
  `loss=2.31, v_num=0`) and `key: value` pairs (`Step: 120 | loss: 2.3456`);
- otherwise names and numbers in turn, separated by blanks (`step 10 loss 2.31 lr 3e-4`, with `,` `|` `;`
  between pairs allowed): at least two pairs that run to the end of the line, so prose such as
  `Epoch 3 took 12.5 seconds` or `saved checkpoint 5` gives nothing.
Numbers include `nan`, `NaN`, `inf`, `-inf`, `Infinity` (any case). Keys are kept as printed.

The step is the value of a `step`, `global_step`, `iter` or `iteration` key (any case; not a metric
itself); a line without one takes the last step its file showed, or else the file's own counter of
lines with values (1, 2, 3, ...). A line that starts with a timestamp (`2024-05-01 12:00:00,123`,
ISO 8601 with `T`, a zone or none, optionally in brackets) gives the time of its values (without a zone:
local time, as Python's logging writes it); lines after it keep that time until the next one.

User patterns (RE2: linear time) are tried first: a line one of them matches gives that pattern's
named groups and is not parsed by the built-in shapes. Events: lines matching an event pattern
(built in: Python traceback, CUDA out of memory, NCCL watchdog timeouts, `Killed`, `nan detected`;
user events too) are reported by name, with whether they are fatal. The lines of a traceback after
its first (indented code, the final exception line) give no values: code like `f(step=3)` is not data.
ANSI escape sequences (colours, cursor moves) are removed first.

Ranks: a line that starts with torchrun's rank prefix (`--tee` and `--log-dir` print each worker's lines as
`[default1]:step=10 loss=2.3`, `[<role><local rank>]:`; with `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'`
as `[rank1]:...`; also `[1]:`) is parsed without it, and its values get the label `rank` (the number in the
prefix: the local rank in torchrun's default, the same on one node). Each rank keeps its own state (step,
counter, time, traceback), so the interleaved lines of the ranks do not mix (`split_rank`, `FileState.of_rank`).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from alertd.userregex import compile_user_regex

STEP_KEYS = frozenset({"step", "global_step", "iter", "iteration"})
IGNORED_KEYS = frozenset({"v_num"})
"""Lightning's progress bar shows the logger version as `v_num`: not a metric."""

MAX_VALUES = 256
"""Values taken from one line at most."""

_ANSI = re.compile(r"\x1b\[[0-?]*+[ -/]*+[@-~]|\x1b\][^\x07\x1b]*+(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_NUM = r"[-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?|[-+]?(?ai:nan|inf(?:inity)?)(?:\.0)?"
_END = r"(?![\w.:/])"
_PAIR = re.compile(rf"(?<![\w./-])([A-Za-z_][\w./-]*+)(?:\s*+=|:)\s*+({_NUM}){_END}")
"""`key=value` and `key: value` (no blank before the colon, so `12:00:01` and `a : b` are not pairs)."""
_NAME = re.compile(r"[A-Za-z_][\w./-]{0,199}+")
_NUMBER = re.compile(_NUM)
_SEPARATORS = re.compile(r"[\s,;|]++")
_NUMBER_ENDS = frozenset("0123456789.nNfFyY")
_DICT_PAIR = re.compile(rf"""['"]([^'"\n]{{1,200}}+)['"]\s*+:\s*+['"]?({_NUM})['"]?{_END}""")
_RANK = re.compile(r"\[(?:[A-Za-z_][\w-]{0,63}?)?(\d{1,6})\]:")
"""torchrun's line prefix: `[default3]:`, `[rank3]:`, `[trainer3]:`, `[3]:`."""
MAX_RANKS = 1024
"""Ranks one file keeps a state for; lines of further ranks are parsed with the file's own state, unlabelled."""
_TIME = re.compile(r"\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?(?![\d])")


@dataclass(frozen=True, slots=True)
class EventPattern:
    """A named pattern whose lines are events; `fatal` ones mean the run crashed."""

    name: str
    regex: Any
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class ValuePattern:
    """A user regex: named groups are values (renamed by `metrics`), a group `step` is the step."""

    regex: Any
    metrics: tuple[tuple[str, str], ...] = ()


BUILTIN_EVENTS: tuple[EventPattern, ...] = (
    # Our own patterns, so Python's `re`: each is literal text or bounded, linear on any line.
    EventPattern("traceback", re.compile(r"^\s*+Traceback \(most recent call last\):"), True),
    EventPattern("cuda_oom", re.compile(r"CUDA out of memory|OutOfMemoryError"), True),
    EventPattern(
        "nccl_timeout",
        re.compile(r"^(?=.*NCCL)(?=.*(?:[Tt]imeout|timed out))|Watchdog caught collective operation timeout"),
        True,
    ),
    EventPattern("killed", re.compile(r"^\s*+Killed\s*+$"), True),
    EventPattern("nan_detected", re.compile(r"(?i)\bnan (?:detected|found)|detected nan"), False),
)
_BUILTIN_HINTS = ("Traceback", "out of memory", "OutOfMemoryError", "NCCL", "Watchdog", "Killed", "etected", "found")
"""Text that every built-in event's line holds: most lines need no more than one search for these."""
_HINTS = re.compile("|".join(re.escape(h) for h in _BUILTIN_HINTS))


@dataclass(slots=True)
class Parsed:
    """What one line says: its values with a step and a time (None: none on the line), its events."""

    values: list[tuple[str, float]] = field(default_factory=list)
    step: int | None = None
    time: float | None = None
    events: list[EventPattern] = field(default_factory=list)


@dataclass(slots=True)
class FileState:
    """What parsing one file remembers from line to line (kept in the source's cursor)."""

    counter: int = 0
    last_step: int | None = None
    last_time: float | None = None
    in_traceback: bool = False
    bar_values: list[tuple[str, float]] = field(default_factory=list)
    ranks: dict[str, FileState] = field(default_factory=dict)
    """The state of each rank whose prefixed lines the file holds (`split_rank`), at most MAX_RANKS."""

    def of_rank(self, rank: str) -> FileState | None:
        """The state of `rank`'s lines, made when first needed; None past MAX_RANKS ranks."""
        state = self.ranks.get(rank)
        if state is None and len(self.ranks) < MAX_RANKS:
            state = self.ranks[rank] = FileState()
        return state

    def to_json(self) -> dict[str, Any]:
        """As JSON-able data."""
        out: dict[str, Any] = {"counter": self.counter, "last_step": self.last_step, "last_time": self.last_time}
        if self.ranks:
            out["ranks"] = {k: v.to_json() for k, v in self.ranks.items()}
        return out

    @classmethod
    def from_json(cls, data: Any) -> FileState:
        """Back from `to_json` (anything unreadable gives a fresh state)."""
        if not isinstance(data, dict):
            return cls()
        step, t = data.get("last_step"), data.get("last_time")
        ranks = data.get("ranks")
        return cls(
            counter=int(data.get("counter") or 0),
            last_step=step if isinstance(step, int) else None,
            last_time=float(t) if isinstance(t, int | float) and math.isfinite(t) else None,
            ranks={str(k): cls.from_json(v) for k, v in list(ranks.items())[:MAX_RANKS]}
            if isinstance(ranks, dict)
            else {},
        )


def series_name(metric: str, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """What a stream files the series of `metric` with the labels `extra` (a rank's) under (`LogStream.keys`)."""
    return f"{metric}\x00{extra}" if extra else metric


def split_rank(line: str) -> tuple[str | None, str]:
    """(the rank of torchrun's prefix, the line without it), or (None, the line) when it has none."""
    if not line.startswith("[", 1 if line.startswith("\r") else 0):
        return None, line
    bar = line.startswith("\r")
    m = _RANK.match(line, 1 if bar else 0)
    if m is None:
        return None, line
    inner = _RANK.match(line, m.end())  # `--tee`'s `[default0]:` before torch's own `[rank0]:` (a traceback's)
    if inner is not None:
        m = inner
    return str(int(m.group(1))), ("\r" if bar else "") + line[m.end() :]


class LineParser:
    """Parses the lines of one source's files (shared by the files; their state is passed in)."""

    def __init__(
        self,
        *,
        builtin: bool = True,
        patterns: Sequence[ValuePattern] = (),
        events: Sequence[EventPattern] = (),
        builtin_events: bool = True,
    ) -> None:
        self.builtin = builtin
        self.patterns = tuple(patterns)
        self.events = tuple(events)
        self.builtin_events = builtin_events

    def parse(self, line: str, state: FileState) -> Parsed:
        """One line (without its terminator). Updates `state` (counter, last step and time).

        A line that starts with `\\r` is a progress bar's state (see `LineTail`): when its values are
        those of the bar's previous state (the bar redrawn for its speed or time), it gives none.
        """
        bar = line.startswith("\r")
        text = _ANSI.sub("", line) if "\x1b" in line else line
        t = leading_time(text)
        if t is not None:
            state.last_time = t
        out = Parsed(time=state.last_time)
        if self.builtin_events and _HINTS.search(text) is not None:
            out.events += [ev for ev in BUILTIN_EVENTS if ev.regex.search(text)]
        for ev in self.events:
            if ev.regex.search(text):
                out.events.append(ev)
        if out.events and any(ev.name == "traceback" for ev in out.events):
            state.in_traceback = True
            return out
        if state.in_traceback:
            if text[:1] not in (" ", "\t") and text.strip():
                state.in_traceback = False  # the exception line ends the traceback
            return out
        step, values = self._values(text.lstrip("\r") if bar else text)
        if bar:
            if values == state.bar_values:
                return out
            state.bar_values = values
        if not values:
            if step is not None:
                state.last_step = step
            return out
        state.counter += 1
        if step is not None:
            state.last_step = step
        out.step = state.last_step if state.last_step is not None else state.counter
        out.values = values
        return out

    def _values(self, text: str) -> tuple[int | None, list[tuple[str, float]]]:
        for pat in self.patterns:
            m = pat.regex.search(text)
            if m is not None:
                return _from_groups(m.groupdict(), dict(pat.metrics))
        if not self.builtin:
            return None, []
        return split_step(builtin_values(text))


def builtin_values(text: str) -> list[tuple[str, float]]:
    """The (key, value) pairs of the built-in shapes on one line, in the order printed."""
    pairs: list[tuple[str, float]] = []
    start = text.find("{")
    if start >= 0 and text.rfind("}") > start:
        pairs = _object_values(text[start : text.rfind("}") + 1])
        if pairs:
            return pairs[:MAX_VALUES]
    if "=" in text or ":" in text:
        found = _PAIR.findall(text)
        try:
            pairs = [(k, float(v)) for k, v in found]
        except ValueError:  # Lightning's `nan.0`
            pairs = [(k, _float(v)) for k, v in found]
    if not pairs:
        pairs = spaced_pairs(text)
    return pairs[:MAX_VALUES]


def spaced_pairs(text: str) -> list[tuple[str, float]]:
    """`step 10 loss 2.31`: the pairs of a name and a number that end the line, if there are two or more.

    Token by token from the end (a split and two bounded matches per token: linear in the line's length)."""
    tail = text.rstrip(" \t,;|")
    if not tail or tail[-1] not in _NUMBER_ENDS:
        return []  # most prose: no split at all
    tokens = [t for t in _SEPARATORS.split(text) if t]
    out: list[tuple[str, float]] = []
    i = len(tokens)
    while i >= 2 and len(out) < MAX_VALUES:
        name, number = tokens[i - 2], tokens[i - 1]
        if _NAME.fullmatch(name) is None or _NUMBER.fullmatch(number) is None:
            break
        out.append((name, _float(number)))
        i -= 2
    return out[::-1] if len(out) >= 2 else []


def split_step(pairs: Iterable[tuple[str, float]]) -> tuple[int | None, list[tuple[str, float]]]:
    """Take the step out of (key, value) pairs: the first integral value of a step key."""
    step: int | None = None
    values: list[tuple[str, float]] = []
    for key, value in pairs:
        if key.lower() in STEP_KEYS:
            if step is None and math.isfinite(value) and value == int(value) and abs(value) < 2**62:
                step = int(value)
            continue
        if key not in IGNORED_KEYS:
            values.append((key, value))
    return step, values


def leading_time(text: str) -> float | None:
    """Epoch seconds of a timestamp at the start of the line (after blanks or `[`), or None."""
    head = text.lstrip()[:40]
    if not head[:1].isdigit() and not head.startswith("["):
        return None
    m = _TIME.match(head)
    if m is None:
        return None
    year, month, day, hour, minute, sec, frac, zone = m.groups()
    whole = _epoch(f"{year}-{month}-{day}T{hour}:{minute}:{sec}", zone)
    if whole is None:
        return None
    return whole + (int(frac) / 10 ** len(frac) if frac else 0.0)


@functools.lru_cache(maxsize=64)
def _epoch(iso: str, zone: str | None) -> float | None:
    """Epoch seconds of a whole-second ISO time (cached: consecutive lines share their second)."""
    if zone:
        iso += "+00:00" if zone == "Z" else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    try:
        dt = datetime.fromisoformat(iso)
        return dt.timestamp() if dt.tzinfo else dt.astimezone().timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _float(text: str) -> float:
    """A number matched by `_NUM`; Lightning's bar prints NaN as `nan.0`."""
    return float(text[:-2] if text[-2:] == ".0" and text[-3:-2].isalpha() else text)


def _object_values(text: str) -> list[tuple[str, float]]:
    if text[1:2] == "'":  # a Python dict (HF Trainer's print): not JSON, no need to ask json
        return [(k, _float(v)) for k, v in _DICT_PAIR.findall(text)]
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return [(k, _float(v)) for k, v in _DICT_PAIR.findall(text)]
    out: list[tuple[str, float]] = []
    if isinstance(obj, dict):
        _flatten(obj, "", out, 0)
    return out


def _flatten(obj: dict[str, Any], prefix: str, out: list[tuple[str, float]], depth: int) -> None:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out.append((name, float(value)))
        elif isinstance(value, str):
            try:
                out.append((name, float(value)))
            except ValueError:
                continue
        elif isinstance(value, dict) and depth < 4:
            _flatten(value, f"{name}/", out, depth + 1)
        if len(out) >= MAX_VALUES:
            return


def _from_groups(groups: dict[str, str | None], names: dict[str, str]) -> tuple[int | None, list[tuple[str, float]]]:
    step: int | None = None
    values: list[tuple[str, float]] = []
    for group, raw in groups.items():
        if raw is None:
            continue
        value = _number(raw)
        if value is None:
            continue
        if group == "step":
            if math.isfinite(value) and value == int(value):
                step = int(value)
            continue
        values.append((names.get(group, group), value))
    return step, values


def _number(raw: str) -> float | None:
    text = raw.strip().strip(",;")
    try:
        return float(text)
    except ValueError:
        return None


def value_patterns(configs: Iterable[Any]) -> list[ValuePattern]:
    """User patterns from the rules file's `patterns:` entries."""
    return [ValuePattern(compile_user_regex(c.regex), tuple(c.metrics.items())) for c in configs]


def event_patterns(configs: Iterable[Any]) -> list[EventPattern]:
    """User events from the rules file's `events:` entries."""
    return [EventPattern(c.name, compile_user_regex(c.regex), c.fatal) for c in configs]
