"""The built-in shapes trainers print, user patterns (RE2), steps, times and events."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest

from alertd.config import load_config
from alertd.errors import ConfigError
from alertd.sources.config import TextEvent, TextPattern
from alertd.sources.textlog.parse import FileState, LineParser, event_patterns, value_patterns


def values(line: str, parser: LineParser | None = None, state: FileState | None = None) -> dict[str, float]:
    p = (parser or LineParser()).parse(line, state or FileState())
    return dict(p.values)


def same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all((math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("step=120 loss=2.3456 lr=3e-4", {"loss": 2.3456, "lr": 3e-4}),
        (
            "2024-05-01 12:00:00,123 INFO step: 3 | loss: 2.5 | tokens_per_sec: 1234.5",
            {"loss": 2.5, "tokens_per_sec": 1234.5},
        ),
        (
            "{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 3e-05, 'epoch': 0.5}",
            {"loss": 2.31, "grad_norm": 1.2, "learning_rate": 3e-05, "epoch": 0.5},
        ),
        (
            "{'loss': nan, 'grad_norm': inf, 'learning_rate': '3e-05', 'epoch': 0.5}",
            {"loss": math.nan, "grad_norm": math.inf, "learning_rate": 3e-05, "epoch": 0.5},
        ),
        (
            '{"step": 4, "loss": NaN, "eval": {"loss": -Infinity}, "note": "ok", "flag": true}',
            {"loss": math.nan, "eval/loss": -math.inf},
        ),
        (
            "Epoch 0:  45%|####5     | 45/100 [00:01<00:01, 30.12it/s, v_num=0, train_loss_step=2.310]",
            {"train_loss_step": 2.31},
        ),
        (
            "Epoch 0:  65%|######5   | 13/20 [00:00<00:00, 169.79it/s, v_num=0, train_loss=nan.0] ",
            {"train_loss": math.nan},
        ),
        (
            "{'loss': '0', 'grad_norm': 'nan', 'learning_rate': '0.00045', 'epoch': '1.5'}",
            {"loss": 0.0, "grad_norm": math.nan, "learning_rate": 0.00045, "epoch": 1.5},
        ),
        (
            "loss=NaN a=nan b=inf c=-inf d=Infinity e=+inf f=-INF",
            {
                "loss": math.nan,
                "a": math.nan,
                "b": math.inf,
                "c": -math.inf,
                "d": math.inf,
                "e": math.inf,
                "f": -math.inf,
            },
        ),
        ("gpu_util=45% mem=3.2GB", {"gpu_util": 45.0}),
        ("version=1.2.3 time=12:00:01 url=http://host:8080/x path=a/b", {}),
        ("\x1b[32mINFO\x1b[0m step=5 \x1b[1mloss=\x1b[0m1.5", {"loss": 1.5}),
        ("INFO:root:loss: 0.25", {"loss": 0.25}),
        ("nothing to see here", {}),
        ("step 10 loss 2.31", {"loss": 2.31}),
        ("2024-05-01 12:00:00,123 INFO epoch 1 iter 40 loss nan lr 3e-4", {"epoch": 1.0, "loss": math.nan, "lr": 3e-4}),
        ("iter 5 | loss 2.5 | grad_norm inf", {"loss": 2.5, "grad_norm": math.inf}),
        ("Epoch 3 took 12.5 seconds", {}),  # prose: the pairs do not run to the end of the line
        ("saved checkpoint 5", {}),  # one pair is not enough
        ("processed 100 batches in 12.5 s", {}),
    ],
)
def test_builtin_shapes(line: str, expected: dict[str, float]) -> None:
    assert same(values(line), expected), values(line)


def test_step_from_a_step_key_else_the_last_step_else_a_counter() -> None:
    parser, state = LineParser(), FileState()
    steps = [parser.parse(line, state).step for line in ("loss=1", "loss=2", "iteration=40 loss=3", "val_loss=4")]
    assert steps == [1, 2, 40, 40]
    state2 = FileState()
    assert parser.parse("global_step=7 loss=1", state2).step == 7
    assert parser.parse("iter: 9, loss: 1", state2).step == 9
    assert parser.parse("{'step': 11, 'loss': 1}", state2).step == 11
    assert "step" not in values("step=3 loss=1")


def test_a_leading_timestamp_is_the_time_of_the_line_and_of_those_after_it() -> None:
    parser, state = LineParser(), FileState()
    assert parser.parse("loss=1", state).time is None
    p = parser.parse("2024-05-01T12:00:00.5Z step=1 loss=2", state)
    assert p.time == datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC).timestamp()
    assert parser.parse("{'loss': 3}", state).time == p.time
    local = parser.parse("[2024-05-01 12:00:01,250] loss=4", state).time
    assert local == datetime(2024, 5, 1, 12, 0, 1, 250000).timestamp()  # no zone: local, as logging writes
    assert (
        parser.parse("2024-05-01 12:00:02+02:00 loss=5", state).time
        == datetime(2024, 5, 1, 10, 0, 2, tzinfo=UTC).timestamp()
    )


def test_builtin_events_and_their_fatality() -> None:
    parser = LineParser()
    cases = {
        "Traceback (most recent call last):": ("traceback", True),
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB": ("cuda_oom", True),
        "[rank0]:[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(...)": (
            "nccl_timeout",
            True,
        ),
        "Killed": ("killed", True),
        "WARNING: NaN detected in loss at step 40": ("nan_detected", False),
    }
    for line, (name, fatal) in cases.items():
        events = parser.parse(line, FileState()).events
        assert [(e.name, e.fatal) for e in events] == [(name, fatal)], line
    assert parser.parse("Killed 3 processes", FileState()).events == []
    assert LineParser(builtin_events=False).parse("Killed", FileState()).events == []


def test_a_traceback_s_code_lines_give_no_values() -> None:
    parser, state = LineParser(), FileState()
    lines = [
        "step=10 loss=1.5",
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "    loss = f(step=3, lr=0.1)",
        "RuntimeError: loss=nan while training",
        "step=11 loss=1.4",
    ]
    got = [dict(parser.parse(line, state).values) for line in lines]
    assert got == [{"loss": 1.5}, {}, {}, {}, {}, {"loss": 1.4}]


def test_user_patterns_take_precedence_and_rename() -> None:
    patterns = value_patterns(
        [TextPattern(regex=r"it (?P<step>\d+) \| obj (?P<loss>\S+) \| gn (?P<gn>\S+)", metrics={"gn": "grad_norm"})]
    )
    parser = LineParser(patterns=patterns)
    p = parser.parse("it 12 | obj nan | gn 3.5 | lr=0.1", FileState())
    assert p.step == 12 and math.isnan(dict(p.values)["loss"]) and dict(p.values)["grad_norm"] == 3.5
    assert "lr" not in dict(p.values)
    assert dict(parser.parse("lr=0.1", FileState()).values) == {"lr": 0.1}  # no match: built-in shapes
    assert LineParser(builtin=False).parse("lr=0.1", FileState()).values == []


def test_user_events() -> None:
    parser = LineParser(events=event_patterns([TextEvent(name="diverged", regex=r"(?i)diverg", fatal=True)]))
    assert [(e.name, e.fatal) for e in parser.parse("Model DIVERGED at step 4", FileState()).events] == [
        ("diverged", True)
    ]


def test_a_catastrophic_user_regex_runs_in_linear_time() -> None:
    parser = LineParser(patterns=value_patterns([TextPattern(regex=r"(?P<x>(a+)+)$b")]))
    line = "a" * 60_000 + "!"
    t0 = time.perf_counter()
    parser.parse(line, FileState())
    assert time.perf_counter() - t0 < 1.0  # Python's re would take longer than the age of the universe


def rules_with(source: str) -> str:
    return f"sources:\n  - {source}\nnotifiers: {{c: {{type: log}}}}\nroute: {{receivers: [c]}}\nrules: []\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('{name: t, type: textlog, path: a.log, patterns: [{regex: "(a)\\\\1(?P<x>b)"}]}', "invalid escape"),
        ('{name: t, type: textlog, path: a.log, patterns: [{regex: "(?=a)(?P<x>b)"}]}', "RE2 syntax"),
        ('{name: t, type: textlog, path: a.log, patterns: [{regex: "loss (\\\\S+)"}]}', "no named group"),
        ('{name: t, type: textlog, path: a.log, patterns: [{regex: "(?P<l>x)", metrics: {m: y}}]}', "['m']"),
        ('{name: t, type: textlog, path: a.log, events: [{name: e, regex: "(?<=x)y"}]}', "RE2 syntax"),
    ],
)
def test_bad_user_regexes_are_config_errors_with_their_place(tmp_path, source: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "rules.yaml"
    path.write_text(rules_with(source))
    with pytest.raises(ConfigError) as err:
        load_config([str(path)])
    text = str(err.value.problems[0])
    assert text.startswith(f"{path}:2: sources[0]") and message in text, text


def test_name_value_pairs_give_their_step_and_stay_linear_on_a_huge_line() -> None:
    p = LineParser().parse("step 10 loss 2.31", FileState())
    assert (p.step, p.values) == (10, [("loss", 2.31)])
    line = "a 1 " * 16_000 + "b"  # 64 KiB of pairs that end in prose: nothing, at once
    started = time.perf_counter()
    assert LineParser().parse(line, FileState()).values == []
    assert LineParser().parse(line[:-2], FileState()).values[:2] == [("a", 1.0), ("a", 1.0)]
    assert time.perf_counter() - started < 1.0
