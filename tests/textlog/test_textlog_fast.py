"""The batch fast path of `LogStream.parse` against the line by line parse it stands for (the oracle:
`LogStream.parse_line`, today's `LineParser.parse` for each line): the same samples, events and states."""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alertd.model import Sample
from alertd.sources.config import TextEvent, TextPattern
from alertd.sources.textlog import fast, stream
from alertd.sources.textlog.parse import (
    _DICT_PAIR,
    _PAIR,
    MAX_RANKS,
    FileState,
    LineParser,
    event_patterns,
    split_rank,
    value_patterns,
)
from alertd.sources.textlog.stream import LogStream

NOW = 1_700_000_000.0

KEYS = [
    "loss", "lr", "grad_norm", "train/loss", "a.b-c", "_x", "v_num", "V_NUM", "epoch", "tokens_per_sec",
    "step", "Step", "STEP", "global_step", "Global_Step", "iter", "ITER", "iteration", "Iteration", "steps",
]  # fmt: skip
NUMBERS = [
    "0", "3", "-7", "12", "2.5", "1.", ".5", "3e-4", "1E+5", "-0.0", "1e400", "4.0", "4.5", "12345678901234567890123",
    "4611686018427387904", "nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "INF", "nan.0", "inf.0",
]  # fmt: skip
TIMES = [
    "2024-05-01 12:00:00,123 ", "2024-05-01T12:00:00.5Z ", "[2024-05-01 12:00:01,250] ", "2024-05-01 12:00:02+02:00 ",
    "2024-05-01 12:00:03 +0200 ", "2024-05-01 12:00:04.123456789 ", "2024-05-01 12:00:05,1234567890 ",
    "2024-13-45 99:00:00 ", "2024-05-01 12:00:06 Z: 5 ", "2024-05-01 12:00:07", "2024-05-01 12:00:08loss=1 ",
    "  2024-05-01 12:00:09 ", "1999-01-01 00:00:00 ", "2024-05-01 12:00:10 5 ", "2024-05-01 12:00:11,5+x ",
    "2024-05-01 12:00:12.\t", "2024-05-01 12:00:13\x1c-", "2024-05-01 12:00:14,07", "2024-05-01 12:00:1 ",
    "2024-05-01 12:00:15.000000000", "2024/05/01 12:00:16 ", "\x1c2024-05-01 12:00:17 ", "[INFO] 2024-05-01 12:00:18 ",
]  # fmt: skip
PROSE = [
    "INFO", "Epoch 3 took 12.5 seconds", "saved checkpoint 5", "[rank0] iteration 5: data loader took 0.05s",
    "version=1.2.3 time=12:00:01 url=http://host:8080/x", "gpu_util=45% mem=3.2GB", "a : b", "x=1-y=2",
    "Epoch 0:  45%|####5     | 45/100 [00:01<00:01, 30.12it/s, v_num=0, train_loss_step=2.310]",
]  # fmt: skip
EVENTS = [
    "Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
    "NCCL watchdog: timed out", "Watchdog caught collective operation timeout: WorkNCCL(...)", "Killed",
    "WARNING: NaN detected in loss=3", "not found: step=2", "RuntimeError: loss=nan while training",
]  # fmt: skip
INDENTED = ['  File "train.py", line 3, in <module>', "    loss = f(step=3, lr=0.1)", "\tx=2", "   "]
EVERYDAY = [
    "2024-05-01 12:00:01,123 INFO step=10 loss=2.3456 lr=3e-4 grad_norm=1.200",
    "{'loss': '2.31', 'grad_norm': '1.1', 'learning_rate': '3e-05', 'epoch': '0.12'}",
    "Step: 11 | loss: 2.5000 | tokens_per_sec: 41234",
    "[rank0] iteration 11: data loader took 0.05s",
    "loss=nan lr=3e-4 step=12",  # the step after the values
    "epoch=0.5 loss=1.5 step=13 lr=2e-4",  # ... and between them
    "Epoch 0:  45%|####5     | 45/100 [00:01<00:01, 30.12it/s, v_num=0, train_loss_step=2.310]",
    "2024-05-01T12:00:02.5Z eval_loss: inf",
    "",
]
PREFIXES = ["", "", "", "[default1]:", "[rank2]:", "[3]:", "[default0]:[rank0]:", "[INFO] ", "[x]:", "\r"]
ANSI = ["\x1b[32m", "\x1b[0m", "\x1b]0;title\x07", "\x1bM"]


@st.composite
def pair(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(KEYS))
    number = draw(st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 10**6).map(str)))
    shape = draw(st.sampled_from(["{k}={v}", "{k}: {v}", "{k} = {v}", "{k}:{v}", "{k} {v}", "'{k}': '{v}'"]))
    return shape.format(k=key, v=number)


@st.composite
def structured(draw: st.DrawFn) -> str:
    """A dict, JSON (nested), or spaced pairs."""
    kind = draw(st.sampled_from(["hf", "json", "spaced", "many"]))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=5))
    numbers = draw(st.lists(st.sampled_from(NUMBERS), min_size=len(keys), max_size=len(keys)))
    if kind == "hf":
        quote = draw(st.sampled_from(["'", ""]))
        return "{" + ", ".join(f"'{k}': {quote}{v}{quote}" for k, v in zip(keys, numbers, strict=True)) + "}"
    if kind == "json":
        inner = ", ".join(
            f'"{k}": {v if v in ("NaN", "Infinity", "-Infinity") else 1.5}' for k, v in zip(keys, numbers, strict=True)
        )
        return '{"step": 3, "eval": {' + inner + '}, "flag": true, "s": "2.5"}'
    if kind == "spaced":
        return " ".join(f"{k} {v}" for k, v in zip(keys, numbers, strict=True))
    return " ".join(f"m{i}={i}" for i in range(draw(st.sampled_from([255, 256, 257, 300]))))


@st.composite
def line(draw: st.DrawFn) -> str:
    """One line of any shape: prefix, time, then pairs, prose, events, ANSI in any mix."""
    kind = draw(
        st.sampled_from(["pairs", "pairs", "pairs", "everyday", "structured", "prose", "event", "indented", ""])
    )
    if not kind:
        return ""
    if kind == "everyday":
        return draw(st.sampled_from(EVERYDAY))
    if kind == "indented":
        return draw(st.sampled_from(INDENTED))
    parts = []
    if draw(st.booleans()):
        parts.append(draw(st.sampled_from(TIMES)))
    if kind == "pairs":
        sep = draw(st.sampled_from([" ", ", ", " | ", "  "]))
        parts.append(sep.join(draw(st.lists(pair(), min_size=1, max_size=5))))
    elif kind == "structured":
        parts.append(draw(st.sampled_from(["", "INFO "])) + draw(structured()))
    elif kind == "prose":
        parts.append(draw(st.sampled_from(PROSE)))
    else:
        parts.append(draw(st.sampled_from(EVENTS)))
    if draw(st.integers(0, 9)) == 0:
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(ANSI)))
    if draw(st.integers(0, 49)) == 0:
        parts.append(" loss=\u0131nf")  # no number: `_NUM` matches ASCII spellings only
    return draw(st.sampled_from(PREFIXES)) + "".join(parts)


@st.composite
def batch(draw: st.DrawFn) -> list[str]:
    """Lines, some repeated (a bar drawn again, a trainer's same line)."""
    lines = draw(st.lists(line(), min_size=1, max_size=40))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
    return lines


USER_PATTERN = TextPattern(regex=r"it (?P<step>\d+) obj (?P<loss>\S+)")
USER_EVENT = TextEvent(name="diverged", regex=r"(?i)diverg")
PARSERS = {
    "default": lambda: LineParser(),
    "no builtin events": lambda: LineParser(builtin_events=False),
    "user patterns": lambda: LineParser(patterns=value_patterns([USER_PATTERN])),
    "user events": lambda: LineParser(events=event_patterns([USER_EVENT])),
    "no builtin": lambda: LineParser(builtin=False),
}


def state_of(state: FileState) -> Any:
    """Everything a state holds, NaN comparable."""
    return (
        state.counter,
        state.last_step,
        state.last_time,
        state.in_traceback,
        [(k, comparable(v)) for k, v in state.bar_values],
        {rank: state_of(s) for rank, s in state.ranks.items()},
    )


def comparable(value: float) -> Any:
    return "nan" if math.isnan(value) else value


def samples_of(out: list[Sample]) -> list[Any]:
    return [(s.series.metric, s.series.labels, s.time, s.step, comparable(s.value)) for s in out]


WARM = " ".join(f"{k}=1" for k in KEYS)
"""A line of every key: the stream knows them all (a new metric's series is made the line by line way)."""


def run_stream(lines: list[str], make: Any, cuts: list[int], by_line: bool, warm: bool = False) -> tuple[Any, ...]:
    """Parse `lines` (in batches cut at `cuts`) through a fresh stream: line by line (the oracle) or batch by
    batch; `warm`: after a first line of every key, parsed line by line."""
    log = LogStream("log", {"source": "tl", "run": "train.log"})
    parser = make()
    out: list[Sample] = []
    error = None
    if warm:
        log.parse_line(parser, WARM, NOW, out)
    bounds = [0, *sorted(set(cuts)), len(lines)]
    try:
        for a, b in itertools.pairwise(bounds):
            if by_line:
                log.lines += b - a
                for text in lines[a:b]:
                    log.parse_line(parser, text, NOW, out)
            else:
                log.parse(parser, lines[a:b], NOW, out)
    except ValueError as exc:
        error = type(exc)
    keys = [(name, key.metric, key.labels) for name, key in log.keys.items()]
    return error, samples_of(out), state_of(log.state), log.lines, log.matched, log.overflow, keys


@pytest.fixture(params=["C loop", "Python loop"])
def loop(request: pytest.FixtureRequest) -> Any:
    """The fast path with its C loop (`_native`, as installed), then with its Python loop alone (as where no C
    compiler was found): both must give what the line by line parse gives."""
    if request.param == "C loop":
        assert fast._native is not None, "alertd.sources.textlog._native was not built (pip install -e . builds it)"
        yield fast._native
    else:
        with mock.patch.object(fast, "_native", None):
            yield None


# `loop` is a patch, the same for every example: the health check's worry does not apply
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=batch(),
    parser=st.sampled_from(["default", "default", "default", *sorted(PARSERS)]),
    cuts=st.lists(st.integers(0, 60), max_size=3),
    window=st.sampled_from([fast.WINDOW, 1, 3, 8]),
    max_series=st.sampled_from([stream.MAX_SERIES, stream.MAX_SERIES, 2, 5]),
    warm=st.sampled_from([True, True, False]),
)
def test_the_fast_path_gives_what_the_line_by_line_parse_gives(
    loop: Any, lines: list[str], parser: str, cuts: list[int], window: int, max_series: int, warm: bool
) -> None:
    cuts = [c for c in cuts if c <= len(lines)]
    with mock.patch.object(fast, "WINDOW", window), mock.patch.object(stream, "MAX_SERIES", max_series):
        expected = run_stream(lines, PARSERS[parser], cuts, by_line=True, warm=warm)
        got = run_stream(lines, PARSERS[parser], cuts, by_line=False, warm=warm)
    assert got == expected


def test_an_everyday_batch_takes_the_fast_path_and_gives_the_oracle_s_samples(loop: Any) -> None:
    """After a first sight of its metrics (a new series is made the line by line way) and a second (the C loop
    hands a name it has not met to the Python loop, which files it in the stream's `known`), not one line of an
    everyday batch goes the line by line way, nor, with the C loop, the Python loop; the samples are those of
    the oracle."""
    lines = EVERYDAY * 50
    first, second = len(EVERYDAY), 2 * len(EVERYDAY)
    expected = run_stream(lines, LineParser, [first, second], by_line=True)
    log = LogStream("log", {"source": "tl", "run": "train.log"})
    out: list[Sample] = []
    log.parse(LineParser(), lines[:first], NOW, out)
    log.parse(LineParser(), lines[first:second], NOW, out)
    python_loop = mock.patch.object(fast, "run_lines", side_effect=AssertionError("the Python loop"))
    with (
        mock.patch.object(LogStream, "parse_line", side_effect=AssertionError("the line by line way")) as slow,
        python_loop if loop is not None else contextlib.nullcontext(),
    ):
        log.parse(LineParser(), lines[second:], NOW, out)
    assert slow.call_count == 0
    keys = [(name, key.metric, key.labels) for name, key in log.keys.items()]
    assert (None, samples_of(out), state_of(log.state), log.lines, log.matched, log.overflow, keys) == expected
    assert len(out) == 50 * 16 and {s.step for s in out[-16:]} == {10, 11, 12, 13}


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-01 12:00:00Zloss=1 lr=2",
        "2024-05-01 12:00:00 Z: 5",
        "a=1 b:2 c = 3 d: nan.0 x=1-y=2 e=1e5f g/h=.5 http://x:8080 é=3 éa=4 _=5",
        "" + "k=1 " * 300,
        "\u0661=2 a\u0661=3 1a=4 .a=5 -a=6 /a=7",
    ],
)
def test_the_fast_pair_pattern_finds_what_the_pair_pattern_finds(text: str) -> None:
    for pos in range(len(text) + 1):
        assert fast._PAIR_FAST.findall(text, pos) == _PAIR.findall(text, pos)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*"ab_Z09.:/-= \t,{}'é\u0661", "nan", "inf", "e5", "x="]), max_size=30).map("".join))
def test_the_fast_pair_pattern_finds_what_the_pair_pattern_finds_anywhere(text: str) -> None:
    for pos in range(len(text) + 1):
        assert fast._PAIR_FAST.findall(text, pos) == _PAIR.findall(text, pos)


def test_a_dotless_i_in_inf_is_no_number_and_fails_nothing() -> None:
    # `re`'s case-insensitive match once took `ınf` (Turkish dotless i) for `inf`, which float() refuses: the
    # whole poll failed on one such line. Now only ASCII spellings are numbers; the line's other pairs stay.
    state = FileState()
    parsed = LineParser().parse("loss=ınf lr=0.1 grad=İnf", state)
    assert parsed.values == [("lr", 0.1)]


SOUP = [*"ab_Z09.:/-= \t\x1c,{}'\"\n[]+", "nan", "NaN", "inf", "inity", "e5", "E-3", ".0", "loss", "step", "2024"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=40).map("".join))
def test_the_c_matcher_finds_what_the_patterns_find(text: str) -> None:
    """`_native.pairs` and `_native.dict_pairs`, the C loop's matchers, against the patterns they follow
    (`_PAIR_FAST`, `_DICT_PAIR` with an end), from every start."""
    native = fast._native
    assert native is not None
    for pos in range(len(text) + 1):
        assert native.pairs(text, pos) == fast._PAIR_FAST.findall(text, pos)
        for end in (len(text), text.rfind("}") + 1):
            assert native.dict_pairs(text, pos, end) == _DICT_PAIR.findall(text, pos, end)


@pytest.mark.parametrize(
    "text",
    [
        "{'" + "k" * 199 + "': 1, '" + "k" * 200 + "': 2, '" + "k" * 201 + "': 3}",
        "x=" + "1" * 5000 + " y=-." + "5" * 70 + "e-3 z=1e400 w=infinity v=INFINITY.0 u=-nan.00 t=1.e5 s=1.5.3",
        "a=1e b=1e+ c=2E-7x d=.e5 e=+-3 f=3: g=4/ h=5. i= \t 6 j\x1c=7 k:\x1c8 l : 9",
    ],
)
def test_the_c_matcher_finds_what_the_patterns_find_on_long_and_odd_values(text: str) -> None:
    native = fast._native
    assert native is not None
    assert native.pairs(text, 0) == fast._PAIR_FAST.findall(text, 0)
    assert native.dict_pairs(text, 0, len(text)) == _DICT_PAIR.findall(text, 0, len(text))


EDGES = [
    "step=4611686018427387904 loss=1", "step=-4611686018427387904 loss=2", "step=4611686018427387903 loss=3",
    "loss=4 step=4.0 step=5", "step=1.5 loss=5 iter=6", "lr=7 step=inf step=-0.0", "v_num=3 loss=8", "v_num=4",
    "step=9", "loss=10 x 11", "loss=12 " * 256, "loss=13 " * 257, "{'loss': 14, 'grad_norm': nan.0}", "loss=15\x00",
    "2024-02-30 12:00:00 loss=16", "2024-05-01 12:00:00.000000001 loss=17", "[2024-05-01 12:00:00] loss=18",
    "\t[2024-05-01 12:00:00.5] loss=19", " " * 39 + "2024-05-01 12:00:00 loss=20", "loss=21 |;, \t",
]  # fmt: skip


@pytest.mark.parametrize("which", ["C loop", "Python loop"])
def test_edge_lines_give_what_the_line_by_line_parse_gives(which: str) -> None:
    """Steps at the edge of an int (2**62 is no step), repeated and late step keys, `v_num` alone, MAX_VALUES
    pairs and one more, a NUL, an impossible date, the 40 characters `leading_time` looks at."""
    lines = EDGES * 2
    with mock.patch.object(fast, "_native", fast._native if which == "C loop" else None):
        expected = run_stream(lines, LineParser, [len(EDGES)], by_line=True, warm=True)
        got = run_stream(lines, LineParser, [len(EDGES)], by_line=False, warm=True)
    assert got == expected


def test_the_c_loop_returns_after_a_megabyte_of_text_and_goes_on() -> None:
    """A window of long lines is read in calls of about a megabyte (the GIL is held through a call), and the
    samples are those of the oracle all the same."""
    lines = [f"step={i} loss={i}.5 {'x' * 60_000}" for i in range(40)]  # 2.4 MB
    expected = run_stream(lines, LineParser, [], by_line=True, warm=True)
    native = mock.Mock(wraps=fast._native)
    with mock.patch.object(fast, "_native", native):
        got = run_stream(lines, LineParser, [], by_line=False, warm=True)
    assert got == expected
    assert [call.args[1] for call in native.run.call_args_list] == [0, 18, 36]  # 18 lines make 1 MiB
    assert [sample[3:] for sample in got[1][-41:]] == [(1, 1.0)] + [(i, i + 0.5) for i in range(40)]


@pytest.mark.parametrize("counter, last_step", [(2**70, None), (5, -(2**65)), (2**62 + 1, 2**62 + 1)])
def test_a_state_past_a_c_integer_is_the_python_loop_s(counter: int, last_step: int | None) -> None:
    """A counter or step that no C integer holds (a state restored from elsewhere): the C loop hands each line to
    the Python loop, whose integers have no end; the samples are the oracle's."""
    lines = ["loss=1", "lr=2 loss=3", "step=7 loss=4"] * 3
    got = []
    for by_line in (True, False):
        log = LogStream("log", {"source": "tl", "run": "train.log"})
        log.parse_line(LineParser(), WARM, NOW, [])
        log.state.counter, log.state.last_step = counter, last_step
        out: list[Sample] = []
        if by_line:
            for text in lines:
                log.parse_line(LineParser(), text, NOW, out)
        else:
            log.parse(LineParser(), lines, NOW, out)
        got.append((samples_of(out), state_of(log.state)))
    assert got[0] == got[1]
    assert got[1][0][0][3] == (last_step if last_step is not None else counter + 1)


RANK_SOUP = ["[", "]", ":", "]:", "default", "rank", "_", "-", "0", "7", "123456", "1234567", "a" * 60, ".", " ", "x"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(RANK_SOUP), max_size=12).map("".join))
def test_the_c_loop_finds_the_rank_split_rank_finds(text: str) -> None:
    native = fast._native
    assert native is not None
    rank, rest = split_rank(text)
    assert native.rank(text) == (None if rank is None else (rank, len(text) - len(rest)))


@pytest.mark.parametrize(
    "text",
    [
        "[default1]:[rank3]:x=1", "[rank1]:[rank01]:", "[0]:[1]:[2]:", "[007]:", "[000]:", "[123456]:", "[1234567]:",
        "[" + "a" * 64 + "1]:x", "[" + "a" * 65 + "1]:x", "[" + "a" * 63 + "1234567]:x", "[" + "a" * 64 + "1234567]:x",
        "[a1234567]:", "[_-9]:", "[-9]:", "[a.1]:", "[a1]", "[a1]:", "[rank2]: [rank3]:", "[]:", "[a]:",
    ],
)  # fmt: skip
def test_the_c_loop_finds_the_rank_split_rank_finds_at_the_edges(text: str) -> None:
    native = fast._native
    assert native is not None
    rank, rest = split_rank(text)
    assert native.rank(text) == (None if rank is None else (rank, len(text) - len(rest)))


@pytest.mark.parametrize("which", ["C loop", "Python loop"])
@pytest.mark.parametrize("max_ranks", [MAX_RANKS, 2])
def test_interleaved_ranks_give_what_the_line_by_line_parse_gives(which: str, max_ranks: int) -> None:
    """torchrun's lines of four ranks, interleaved, with the file's own lines between them and a rank's traceback:
    each rank's own state and series (past MAX_RANKS ranks, the line by line way: the file's own)."""
    lines = []
    for i in range(30):
        for r in (0, 1, 2, 3):
            lines.append(f"[default{r}]:step={i} loss={r + i / 10} lr=3e-4")
        lines.append(f"[rank1]:[rank01]:iter {i}: tokens_per_sec={1000 + i}")
        if i % 10 == 3:
            lines.append(f"2024-05-01 12:00:0{i % 10} eval_loss={i}")
        if i == 12:
            lines += [
                "[default2]:Traceback (most recent call last):",
                '[default2]:  File "t.py", line 1',
                "[default2]:x=1",
            ]
    with (
        mock.patch.object(fast, "_native", fast._native if which == "C loop" else None),
        mock.patch("alertd.sources.textlog.parse.MAX_RANKS", max_ranks),
    ):
        expected = run_stream(lines, LineParser, [37, 90], by_line=True)
        got = run_stream(lines, LineParser, [37, 90], by_line=False)
    assert got == expected
    assert {label for s in got[1] for label in s[1] if label[0] == "rank"} == {
        ("rank", str(r)) for r in range(max_ranks if max_ranks < 4 else 4)
    }


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(st.characters(max_codepoint=127, exclude_characters="\n"), max_size=60), min_size=1, max_size=20),
    st.sampled_from(["C loop", "Python loop"]),
)
def test_any_ascii_gives_what_the_line_by_line_parse_gives(lines: list[str], which: str) -> None:
    """Lines of any ASCII characters (control characters too): the C loop never reads past a line, never
    differs from the oracle."""
    with mock.patch.object(fast, "_native", fast._native if which == "C loop" else None):
        expected = run_stream(lines, LineParser, [], by_line=True, warm=True)
        got = run_stream(lines, LineParser, [], by_line=False, warm=True)
    assert got == expected


TIME_SOUP = ["2024-05-01", " ", "T", "12:00:0", "7", ",", ".", "123", "1234567890", "Z", "+02:00", "-0130", "\t", "["]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(TIME_SOUP), max_size=8).map("".join),
            st.sampled_from(["loss=1.5 step=3", "lr: 2e-4", "{'loss': '2.5'}", "x 5", "", '{"a": 1}', "done"]),
        ).map("".join),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["C loop", "Python loop"]),
)
def test_lines_that_start_with_any_time_shape_give_what_the_line_by_line_parse_gives(
    lines: list[str], which: str
) -> None:
    """The C loop takes a time only without a zone and with at most 9 digits of fraction; every other shape
    (and the digits that are no time) is handed back to the Python loop: either way the oracle's samples."""
    with mock.patch.object(fast, "_native", fast._native if which == "C loop" else None):
        expected = run_stream(lines, LineParser, [], by_line=True, warm=True)
        got = run_stream(lines, LineParser, [], by_line=False, warm=True)
    assert got == expected
