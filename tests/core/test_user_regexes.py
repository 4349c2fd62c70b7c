"""Every user regex is RE2 (linear time): rules' labels_match, routes, silences, kill's cmdline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from alertd.buffer import SeriesBuffer
from alertd.config import load_config
from alertd.dispatch.matchers import Matcher, MatchOp
from alertd.errors import ConfigError
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import RuleSet, evaluate

EVIL = "(a+)+$"
VICTIM = "a" * 30_000 + "b"  # Python's re: exponential time on this; RE2: linear


def test_a_catastrophic_labels_match_regex_evaluates_in_linear_time(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(f'rules: [{{name: x, metric: loss, labels_match: {{run: "=~{EVIL}"}}, condition: nonfinite}}]\n')
    cfg = load_config([str(rules)])
    buf = SeriesBuffer()
    buf.append([Sample(SeriesKey("loss", make_labels({"run": VICTIM})), 1.0, 1, float("nan"))])
    t0 = time.perf_counter()
    ev = evaluate(RuleSet(cfg.rules), buf, 1.0)
    assert time.perf_counter() - t0 < 2.0
    assert ev.transitions == ()  # the run name does not match: no alert


def test_a_catastrophic_silence_matcher_runs_in_linear_time() -> None:
    m = Matcher("run", MatchOp.RE, EVIL)
    t0 = time.perf_counter()
    assert not m.matches({"run": VICTIM})
    assert m.matches({"run": "aaa"})
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize(
    "fragment",
    [
        '{name: x, metric: loss, labels_match: {run: "=~(a)\\\\1"}, condition: nonfinite}',
        '{name: x, metric: loss, labels_match: {run: "=~(?=a)"}, condition: nonfinite}',
    ],
)
def test_what_re2_cannot_do_is_a_config_error_with_its_place(tmp_path: Path, fragment: str) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(f"rules:\n  - {fragment}\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(rules)])
    text = str(err.value.problems[0])
    assert text.startswith(f"{rules}:2: rules[0].labels_match") and "RE2 syntax" in text, text
