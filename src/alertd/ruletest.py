"""`alertd test`: rule unit tests in the manner of `promtool test rules`.

    rule_files: [../default.yaml]          # relative to this file
    tests:
      - name: loss NaN fires at once
        interval: 10s                      # time between input samples (default 1m)
        input_series:
          - series: 'train/loss{run="exp1", source="tb"}'
            values: "2.5 2.4 _ NaN 1+1x3"  # `_` = no sample; a+bxN = a, a+b, ... (N+1 values); axN = N+1 times a
            steps: "0+10x7"                # optional, same notation; default: the slot index
        alert_rule_test:
          - eval_time: 30s
            alertname: loss_not_finite
            exp_alerts:
              - exp_labels: {metric: train/loss, run: exp1, source: tb}
                exp_state: firing          # default firing; pending alerts must be listed too
                exp_annotations: {summary: "..."}   # compared exactly when given

At each `eval_time` the alerts of `alertname` that are pending or firing must be exactly those listed.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError

from alertd.config import load_config
from alertd.config_types import Duration, Strict
from alertd.dryrun import Replay
from alertd.errors import ConfigError, Problem
from alertd.model import Alert, Sample, SeriesKey, make_labels
from alertd.rules.evaluate import RuleSet
from alertd.yamlfile import load_yaml

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TOKEN = re.compile(rf"^(?P<a>{_NUM}|[-+]?Inf|NaN|_)(?:(?P<op>[-+])(?P<b>{_NUM}))?(?:x(?P<n>\d+))?$")
_SERIES = re.compile(r"^\s*([^{\s]+)\s*(?:\{(.*)\})?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def expand_values(text: str) -> list[float | None]:
    """Expand the series notation; None is a slot without a sample (`_`)."""
    out: list[float | None] = []
    for token in str(text).split():
        m = _TOKEN.match(token)
        if not m:
            raise ValueError(f"can't read {token!r}: use numbers, NaN, Inf, _, a+bxN, a-bxN or axN")
        a, op, b, n = m.group("a"), m.group("op"), m.group("b"), m.group("n")
        count = int(n) + 1 if n is not None else 1
        if a == "_":
            if op:
                raise ValueError(f"can't read {token!r}: `_` takes no increment")
            out.extend([None] * count)
            continue
        start = float(a.replace("Inf", "inf"))
        delta = float(b) * (-1 if op == "-" else 1) if op else 0.0
        if op and n is None:
            raise ValueError(f"can't read {token!r}: an increment needs a count (a+bxN)")
        out.extend(start + delta * k for k in range(count))
    return out


def parse_series(text: str) -> SeriesKey:
    """`train/loss{run="exp1"}` as a SeriesKey."""
    m = _SERIES.match(text)
    if not m:
        raise ValueError(f'can\'t read series {text!r}: write name{{label="value", ...}}')
    body = m.group(2) or ""
    labels, pos = {}, 0
    while pos < len(body.strip()):
        lm = _LABEL.match(body, pos)
        if not lm:
            raise ValueError(f"can't read the labels of {text!r} at {body[pos:]!r}")
        labels[lm.group(1)] = lm.group(2).replace('\\"', '"').replace("\\\\", "\\")
        pos = lm.end()
    return SeriesKey(m.group(1), make_labels(labels))


class InputSeries(Strict):
    """One input series of a test."""

    series: str
    values: str
    steps: str | None = None
    interval: Duration | None = None


class ExpAlert(Strict):
    """An alert expected at an evaluation time."""

    exp_labels: dict[str, str] = Field(default_factory=dict)
    exp_annotations: dict[str, str] | None = None
    exp_state: str = Field(default="firing", pattern="^(pending|firing)$")


class AlertTest(Strict):
    """The alerts of one rule expected at one time."""

    eval_time: Duration
    alertname: str
    exp_alerts: list[ExpAlert] = Field(default_factory=list)


class TestCase(Strict):
    """One test: input series and expectations."""

    name: str = ""
    interval: Duration = 60.0
    input_series: list[InputSeries] = Field(default_factory=list)
    alert_rule_test: list[AlertTest] = Field(default_factory=list)


class TestFile(Strict):
    """A test file."""

    rule_files: list[str] = Field(min_length=1)
    tests: list[TestCase] = Field(min_length=1)


@dataclass
class Outcome:
    """What running one test file found."""

    passed: int
    failures: list[str]


def run_test_file(path: str) -> Outcome:
    """Run every test of a test file; raise ConfigError when it (or a rules file) is invalid."""
    doc = load_yaml(path)
    try:
        spec = TestFile.model_validate(doc.data or {})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            place, line = doc.line_of(err["loc"])
            problems.append(Problem(path, place, err["msg"], line))
        raise ConfigError(problems) from exc
    base = os.path.dirname(path)
    config = load_config([os.path.join(base, f) for f in spec.rule_files])
    ruleset = RuleSet(config.rules)
    outcome = Outcome(0, [])
    for n, case in enumerate(spec.tests):
        label = case.name or f"tests[{n}]"
        try:
            samples = _inputs(case)
        except ValueError as exc:
            raise ConfigError(
                [Problem(path, f"tests[{n}].input_series", str(exc), doc.line_of(("tests", n))[1])]
            ) from exc
        failed = _run_case(ruleset, config.buffer, case, samples, config.stall_after)
        if failed:
            outcome.failures.append(f"FAIL {path}: {label}\n" + "\n".join(failed))
        else:
            outcome.passed += 1
    return outcome


def _inputs(case: TestCase) -> list[Sample]:
    samples = []
    for s in case.input_series:
        key = parse_series(s.series)
        values = expand_values(s.values)
        steps = expand_values(s.steps) if s.steps else [float(i) for i in range(len(values))]
        if len(steps) < len(values):
            raise ValueError(f"{s.series}: {len(values)} values but only {len(steps)} steps")
        every = s.interval or case.interval
        for i, v in enumerate(values):
            if v is not None:
                step = steps[i]
                samples.append(Sample(key, i * every, None if step is None or math.isnan(step) else int(step), v))
    samples.sort(key=lambda x: x.time)
    return samples


def _run_case(
    ruleset: RuleSet, limits: Any, case: TestCase, samples: Sequence[Sample], stall_after: float
) -> list[str]:
    replay = Replay(ruleset, limits, stall_after=stall_after, live=True)  # eval times are a live clock
    problems = []
    fed = 0
    for check in sorted(case.alert_rule_test, key=lambda c: c.eval_time):
        upto = fed
        while upto < len(samples) and samples[upto].time <= check.eval_time:
            upto += 1
        replay.feed(list(samples[fed:upto]))
        fed = upto
        replay.advance(check.eval_time)
        if check.alertname not in ruleset.by_name:
            problems.append(f"  at {check.eval_time:g}s: no rule named {check.alertname!r} in the rule files")
            continue
        got = [a for a in replay.state.alerts(ruleset.rules) if a.rule == check.alertname]
        problems += _compare(check, got)
    problems += [f"  rule {name}: error: {msg}" for name, msg in replay.errors.items()]
    return problems


def _compare(check: AlertTest, got: list[Alert]) -> list[str]:
    def shown(state: str, labels: dict[str, str], ann: dict[str, str] | None) -> str:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{state} {{{inner}}}" + (f" annotations={ann}" if ann else "")

    expected = sorted(shown(e.exp_state, e.exp_labels, e.exp_annotations) for e in check.exp_alerts)
    want_ann = {tuple(sorted(e.exp_labels.items())): e.exp_annotations for e in check.exp_alerts}
    actual = sorted(
        shown(a.state.value, dict(a.labels), dict(a.annotations) if want_ann.get(a.labels) is not None else None)
        for a in got
    )
    if expected == actual:
        return []
    lines = [f"  alertname {check.alertname} at eval_time {check.eval_time:g}s:", "    expected:"]
    lines += [f"      {x}" for x in expected] or ["      (no alerts)"]
    lines.append("    got:")
    lines += [f"      {x}" for x in actual] or ["      (no alerts)"]
    missing = set(expected) - set(actual)
    extra = set(actual) - set(expected)
    lines += [f"    - {x}" for x in sorted(missing)] + [f"    + {x}" for x in sorted(extra)]
    return lines
