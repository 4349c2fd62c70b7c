"""Run a test file: rule files, input series, the evaluation grid, stale markers, expectations.

Time: input sample k of a series is at `start_timestamp + k * interval`. The engine is alertd's own
(`Replay`, a live clock): conditions are judged as samples arrive and `for:` ends at its exact instant,
as in the service. An `eval_time` is looked at where promtool looks at it: at the last point of the
`evaluation_interval` grid at or before it (`eval_time: 5m30s` with the default 1m is the state at 5m),
with every sample up to that point fed.

`stale` ends its series at that instant: the rules on it (all but `absent`) see their condition stop
holding there, so a pending alert goes away and a firing one resolves (after its `keep_firing_for`); a
later value starts it again. `absent` counts from the last real sample, as `absent_over_time` does.
`_` is no sample: unlike PromQL, whose lookback forgets a series after 5 minutes without samples,
alertd keeps judging the latest sample (an alert on it stays) until new data or `stale`.
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from alertd.config import Config, load_config
from alertd.dryrun import Replay
from alertd.durations import format_duration
from alertd.errors import ConfigError, Problem
from alertd.model import AlertState, Sample, SeriesKey
from alertd.rules.evaluate import RuleSet
from alertd.rules.state import next_event, set_condition
from alertd.ruletest.compare import compare
from alertd.ruletest.notation import MAX_VALUES, STALE, StaleMarker, expand_values, parse_series
from alertd.ruletest.spec import KNOWN_KEYS, AlertTest, TestFile, TestGroup
from alertd.yamlfile import Document, load_yaml

_GLOB = re.compile(r"[*?[]")

PROMQL_REFUSED = (
    "not run: alertd's rules are not PromQL, so there is no PromQL engine to evaluate the expression "
    "(the file's alert_rule_test entries run)"
)


@dataclass
class Outcome:
    """What running one test file found."""

    passed: int
    failures: list[str]
    refused: list[str] = field(default_factory=list)
    """The entries not run (`promql_expr_test`), each with its place and why."""
    notes: list[str] = field(default_factory=list)
    """Keys accepted that change nothing in alertd (`group_eval_order`), each said once."""
    checks: int = 0
    """The alert_rule_test entries run."""


@dataclass(frozen=True)
class _Stale:
    time: float
    key: SeriesKey


@dataclass
class _Prepared:
    samples: list[Sample]
    stales: list[_Stale]
    checks: list[tuple[float, float, int, AlertTest]]
    """(the grid point's time, the grid point after the start, the entry's index, the entry), in time order."""


def run_test_file(path: str) -> Outcome:
    """Run every test group of a promtool-style test file; raise ConfigError when it (or a rule file) is invalid."""
    doc = load_yaml(path)
    spec = _validate(doc)
    config = _load_rules(doc, spec)
    ruleset = RuleSet(config.rules)
    outcome = Outcome(0, [])
    if spec.group_eval_order:
        outcome.notes.append(
            f"{path}: group_eval_order: accepted, and changes nothing: alertd's rules have no groups, and each "
            "rule is judged on its own series, so no order of evaluation changes a result"
        )
    problems: list[Problem] = []
    runnable: list[tuple[int, TestGroup, _Prepared]] = []
    total = 0
    for n, group in enumerate(spec.tests):
        prepared = _prepare(doc, spec, n, group, problems, MAX_VALUES - total)
        if prepared is not None:
            total += len(prepared.samples) + len(prepared.stales)
            runnable.append((n, group, prepared))
    if problems:
        raise ConfigError(problems)
    for n, group, prepared in runnable:
        label = group.name or f"tests[{n}]"
        for i, entry in enumerate(group.promql_expr_test):
            expr = entry.get("expr") if isinstance(entry, dict) else None
            what = f" ({expr[:200]!r})" if isinstance(expr, str) else ""
            outcome.refused.append(f"{path}: tests[{n}].promql_expr_test[{i}]{what}: {PROMQL_REFUSED}")
        if group.promql_expr_test and not group.alert_rule_test:
            continue  # Nothing of this group ran: neither passed nor failed (the refusals say so).
        failed = _run_group(ruleset, config, prepared)
        outcome.checks += len(prepared.checks)
        if failed:
            outcome.failures.append(f"FAIL {path}: {label}\n" + "\n".join(failed))
        else:
            outcome.passed += 1
    return outcome


def _validate(doc: Document) -> TestFile:
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise ConfigError([Problem(doc.file, "", "a test file is a mapping with rule_files and tests")])
    try:
        return TestFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            place, line = doc.line_of(err["loc"])
            problems.append(Problem(doc.file, place, _message(err), line))
        raise ConfigError(problems) from None


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        key = str(err["loc"][-1])
        hint = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.75)
        return f"unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    msg = str(err["msg"])
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def _load_rules(doc: Document, spec: TestFile) -> Config:
    """The rule files, relative to the test file, globs expanded (in name order) as promtool does."""
    base = os.path.dirname(doc.file)
    files: list[str] = []
    for i, pattern in enumerate(spec.rule_files):
        full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
        if _GLOB.search(full):
            found = sorted(glob.glob(full))
            if not found:
                raise ConfigError([_problem(doc, ("rule_files", i), f"no file matches {pattern!r}")])
            files += found
        else:
            files.append(full)
    try:
        return load_config(files)
    except ConfigError as exc:
        if any(p.place == "groups" for p in exc.problems):
            hint = [
                Problem(
                    doc.file,
                    "rule_files",
                    "a rule file has Prometheus' `groups:`: alertd test runs alertd's rules, not PromQL ones; "
                    "write the alertd rules that mean the same (README: Rule unit tests) and keep the test file",
                )
            ]
            raise ConfigError(exc.problems + hint) from None
        raise


def _prepare(
    doc: Document, spec: TestFile, n: int, group: TestGroup, problems: list[Problem], budget: int
) -> _Prepared | None:
    """A group's samples, stale markers and checks; problems (with their places) go to `problems`."""
    grid_ms = max(1, round(spec.evaluation_interval * 1000)) if spec.evaluation_interval else 60_000
    every = group.interval or grid_ms / 1000  # 0 or absent: the evaluation interval, as in promtool
    start = group.start_timestamp
    samples: list[Sample] = []
    stales: list[_Stale] = []
    ok = True
    for i, s in enumerate(group.input_series):
        where = ("tests", n, "input_series", i)
        try:
            key = parse_series(s.series)
        except ValueError as exc:
            problems.append(_problem(doc, (*where, "series"), str(exc)))
            ok = False
            continue
        try:
            values = expand_values(s.values, max(0, budget - len(samples) - len(stales)))
        except ValueError as exc:
            problems.append(_problem(doc, (*where, "values"), str(exc)))
            ok = False
            continue
        steps: list[Any] = list(range(len(values)))
        if s.steps is not None:
            try:
                steps = expand_values(s.steps)
            except ValueError as exc:
                problems.append(_problem(doc, (*where, "steps"), str(exc)))
                ok = False
                continue
            if STALE in steps:
                problems.append(_problem(doc, (*where, "steps"), "a step can't be stale"))
                ok = False
                continue
            if any(isinstance(x, float) and math.isfinite(x) and abs(x) >= 2**63 for x in steps):
                problems.append(_problem(doc, (*where, "steps"), "a step must fit in 64 bits"))
                ok = False
                continue
            if len(steps) < len(values):
                problems.append(_problem(doc, (*where, "steps"), f"{len(values)} values but {len(steps)} steps"))
                ok = False
                continue
        step_every = s.interval or every
        for k, v in enumerate(values):
            t = start + k * step_every
            if isinstance(v, StaleMarker):
                stales.append(_Stale(t, key))
            elif v is not None:
                step = steps[k]
                samples.append(Sample(key, t, None if step is None or not math.isfinite(step) else int(step), v))
    checks = []
    for i, check in enumerate(group.alert_rule_test):
        grid = (round(check.eval_time * 1000) // grid_ms) * grid_ms / 1000
        checks.append((start + grid, grid, i, check))
    if not ok:
        return None
    samples.sort(key=lambda x: x.time)
    stales.sort(key=lambda x: x.time)
    checks.sort(key=lambda c: (c[0], c[2]))
    return _Prepared(samples, stales, checks)


def _problem(doc: Document, loc: tuple[str | int, ...], message: str) -> Problem:
    place, line = doc.line_of(loc)
    return Problem(doc.file, place, message, line)


def _run_group(ruleset: RuleSet, config: Config, prepared: _Prepared) -> list[str]:
    replay = Replay(ruleset, config.buffer, stall_after=config.stall_after, live=True)  # eval times: a live clock
    samples, stales = prepared.samples, prepared.stales
    problems: list[str] = []
    fed = si = 0
    for at, grid, _, check in prepared.checks:
        while si < len(stales) and stales[si].time <= at:
            fed = _feed(replay, samples, fed, stales[si].time)
            replay.advance(stales[si].time)
            _end_series(replay, stales[si])
            si += 1
        fed = _feed(replay, samples, fed, at)
        replay.advance(at)
        where = f"eval_time {format_duration(check.eval_time)}"
        if grid != check.eval_time:
            where += f" (the evaluation at {format_duration(grid)})"
        if check.alertname not in ruleset.by_name:
            problems.append(f"  {where}: no rule named {check.alertname!r} in the rule files")
            continue
        got = [a for a in replay.state.alerts(ruleset.rules) if a.rule == check.alertname]
        problems += compare(check, got, where)
    problems += [f"  rule {name}: error: {msg}" for name, msg in replay.errors.items()]
    return problems


def _feed(replay: Replay, samples: Sequence[Sample], fed: int, upto: float) -> int:
    end = fed
    while end < len(samples) and samples[end].time <= upto:
        end += 1
    if end > fed:
        replay.feed(list(samples[fed:end]))
    return end


def _end_series(replay: Replay, stale: _Stale) -> None:
    """A stale marker: the condition of every rule on the series (but `absent`) stops holding at its time."""
    state = replay.state
    tracks = dict(state.tracks)
    timers = dict(state.timers)
    active = set(state.active_pairs())
    changed = False
    for pair, old in state.tracks.items():
        rule = replay.ruleset.by_name.get(pair[0])
        if pair[1] != stale.key or rule is None or rule.absent is not None:
            continue
        tr = old.copy()
        tr.streak = 0
        if tr.cond:
            set_condition(rule, tr, False, stale.time, lambda *_: None)
        tracks[pair] = tr
        due = next_event(rule, tr, None)
        if due is None:
            timers.pop(pair, None)
        else:
            timers[pair] = due
        if tr.state is AlertState.INACTIVE:
            active.discard(pair)
        changed = True
    if changed:
        replay.state = dataclasses.replace(state, tracks=tracks, timers=timers, active=frozenset(active))
