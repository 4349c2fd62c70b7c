"""`expr` rules in the engine: the step join per run, the watermark, globs per run, restarts, `for` and
`consecutive`, reloads; the answer never depends on how the samples arrive."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from core_helpers import rule
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.config import load_config
from alertd.dryrun import Replay
from alertd.errors import ConfigError
from alertd.model import Sample, SeriesKey, Transition, format_value, make_labels
from alertd.rules import Rule, RuleSet, evaluate
from alertd.rules.carry import carry_over, restored
from alertd.rules.evaluate import EvalState

RATIO = "{name: overfit, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}"


def key(metric: str, run: str = "a", **more: str) -> SeriesKey:
    return SeriesKey(metric, make_labels({"source": "tb", "run": run, **more}))


def row(t: Transition) -> tuple[float, str, str, int | None, float | str, dict[str, str]]:
    """A transition to compare (NaN as the string NaN: NaN != NaN)."""
    return (t.time, t.rule, t.state.value, t.step, format_value(t.value), dict(t.labels))


def replayed(rules: Sequence[Rule], batches: Sequence[Sequence[Sample]], until: float | None = None) -> list:  # type: ignore[type-arg]
    """Every transition, feeding the batches through the dry-run's Replay (the same `evaluate`)."""
    replay = Replay(RuleSet(list(rules)), BufferLimits(max_samples=512, max_age=1e9))
    out = []
    for batch in batches:
        out += replay.feed(list(batch)).transitions
    if until is not None:
        out += replay.advance(until).transitions
    assert not replay.errors, replay.errors
    return sorted(row(t) for t in out)


def arrived(rules: Sequence[Rule], arrivals: Sequence[tuple[float, Sequence[Sample]]]) -> tuple[list, EvalState]:  # type: ignore[type-arg]
    """Every transition when batches arrive at the service's clock `now` (any order across series)."""
    ruleset, buffer, state, out = RuleSet(list(rules)), SeriesBuffer(BufferLimits(max_age=1e9)), EvalState(), []
    for now, batch in arrivals:
        buffer.append(list(batch), now)
        ev = evaluate(ruleset, buffer, now, state)
        assert not ev.errors, ev.errors
        state = ev.state
        out += ev.transitions
    return sorted(row(t) for t in out), state


def test_judged_at_the_steps_every_series_has_with_the_run_labels_and_the_ratio() -> None:
    train, ev = key("train/loss"), key("eval/loss")
    data = []
    for step in range(0, 101, 10):  # train every 10 steps, eval every 20 (5 s after train)
        data.append(Sample(train, float(step), step, 1.0))
        if step % 20 == 0:
            data.append(Sample(ev, step + 5.0, step, 2.0 if step >= 60 else 1.2))
    got = replayed([rule(RATIO)], [[s] for s in data])
    labels = {"metric": "eval/loss", "run": "a", "source": "tb"}  # metric: the expression's first name
    assert got == [(65.0, "overfit", "firing", 60, 2.0, labels)]  # the value: the left side, eval/train


def test_a_step_that_not_every_series_has_is_not_judged() -> None:
    r = rule("{name: hi, condition: {expr: 'train_loss > 5 and val_loss >= 0'}}")
    tl, vl = key("train_loss"), key("val_loss")
    data = [Sample(tl, float(s), s, 10.0 if s == 30 else 1.0) for s in range(0, 100, 10)]
    data += [Sample(vl, s + 0.5, s, 1.0) for s in range(0, 100, 20)]  # val never at step 30
    assert replayed([r], [sorted(data, key=lambda s: s.time)]) == []
    data.append(Sample(tl, 101.0, 100, 10.0))
    data.append(Sample(vl, 102.0, 100, 1.0))
    got = replayed([r], [[s] for s in sorted(data, key=lambda s: s.time)])
    assert [(t[2], t[3]) for t in got] == [("firing", 100)]


def test_the_watermark_waits_for_the_slow_series_then_gives_what_an_interleaved_arrival_gives() -> None:
    rules = [
        rule(RATIO),
        rule("{name: held, for: 25s, keep_firing_for: 10s, condition: {expr: '`eval/loss` > `train/loss` * 1.5'}}"),
    ]
    train, ev = key("train/loss"), key("eval/loss")
    evals = [1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0]
    t_rows = [Sample(train, step * 10.0, step, 1.0) for step in range(11)]
    e_rows = [Sample(ev, step * 10.0 + 1, step, v) for step, v in enumerate(evals)]
    interleaved, _ = arrived(rules, [(s.time, [s]) for s in sorted(t_rows + e_rows, key=lambda s: s.time)])
    assert ("firing", 2) in [(t[2], t[3]) for t in interleaved if t[1] == "overfit"]
    assert [(t[1], t[2], t[0]) for t in interleaved if t[1] == "held"] == [
        ("held", "pending", 21.0),
        ("held", "firing", 46.0),  # 25 s after it began, on the data's clock
        ("held", "resolved", 71.0),  # 10 s after step 6 (time 61) stopped it
        ("held", "pending", 81.0),
        ("held", "inactive", 91.0),
    ]
    in_time_order = sorted(t_rows + e_rows, key=lambda s: s.time)
    for size in (1, 3, 7, len(in_time_order)):  # a dry-run, in batches of any size
        chunks = [in_time_order[i : i + size] for i in range(0, len(in_time_order), size)]
        assert replayed(rules, chunks) == interleaved
    # the evaluator's series (the first name) is read first, the trainer's later and in pieces
    other, _ = arrived(rules, [(300.0, e_rows), (301.0, t_rows[:5]), (302.0, t_rows[5:])])
    assert other == interleaved
    # the trainer's series is read first, the evaluator's hours later: nothing is judged before every
    # series has reached a step, then the same steps are judged the same way
    first, state = arrived(rules, [(200.0, t_rows)])
    assert first == [] and state.tracks == {}
    late, _ = arrived(rules, [(200.0, t_rows), (5000.0, e_rows[:3]), (5001.0, e_rows[3:7]), (9000.0, e_rows[7:])])
    assert [t for t in late if t[1] == "overfit"] == [t for t in interleaved if t[1] == "overfit"]
    # (`for:` runs up to the clock, as for every rule: with the first name's samples hours behind the
    # clock, `held` fires at the same instant, 46 s, but before steps 3 and 4 are known, so it says step 2)
    assert [(t[2], t[0], t[3]) for t in late if t[1] == "held"][:2] == [("pending", 21.0, 2), ("firing", 46.0, 2)]


def test_runs_are_joined_on_their_own_labels_only() -> None:
    data = [
        Sample(key("train/loss", "a"), 1.0, 1, 1.0),
        Sample(key("eval/loss", "b"), 2.0, 1, 9.0),  # another run: never joined with run a
        Sample(key("eval/loss", "a", host="n2"), 3.0, 1, 9.0),  # another writer: another label set
        Sample(key("train/loss", "b"), 4.0, 1, 2.0),
    ]
    got = replayed([rule(RATIO)], [data])
    assert [(t[3], t[5]["run"]) for t in got] == [(1, "b")]


def test_a_glob_resolves_per_run_and_an_ambiguous_one_is_an_error_for_that_run_only() -> None:
    r = rule("{name: overfit, condition: {expr: '`*val*loss` / `train/loss` > 1.5'}}")
    data = []
    for run, val_names in (("a", ["val/loss"]), ("b", ["eval/val_loss"]), ("c", ["val/loss", "eval/val_loss"])):
        for step in range(3):
            data.append(Sample(key("train/loss", run), step * 10.0, step, 1.0))
            for name in val_names:
                data.append(Sample(key(name, run), step * 10.0 + 1, step, 2.0))
    replay = Replay(RuleSet([r]))
    out = replay.feed(sorted(data, key=lambda s: s.time)).transitions
    assert sorted((dict(t.labels)["run"], dict(t.labels)["metric"], t.step) for t in out) == [
        ("a", "val/loss", 0),
        ("b", "eval/val_loss", 0),
    ]
    assert replay.errors == {
        "overfit": '`*val*loss` matches 2 series of the run {run="c",source="tb"} (eval/val_loss, val/loss); '
        "it must match one"
    }


def test_a_resume_from_a_checkpoint_judges_the_rewritten_steps_again() -> None:
    r = rule("{name: overfit, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}")
    train, ev = key("train/loss"), key("eval/loss")
    before = [
        s
        for step in range(0, 6)
        for s in (Sample(train, step * 10.0, step, 1.0), Sample(ev, step * 10.0 + 1, step, 1.0))
    ]
    # crash after step 5; resumed from the checkpoint of step 3: the new eval loss is worse
    after = [
        s
        for step in range(3, 6)
        for s in (Sample(train, 100 + step * 10.0, step, 1.0), Sample(ev, 101 + step * 10.0, step, 2.0))
    ]
    for batches in ([before, after], [[s] for s in before + after]):
        got = replayed([r], batches)
        assert [(t[2], t[3], t[0]) for t in got] == [("firing", 3, 131.0)]


def test_consecutive_counts_judged_steps() -> None:
    r = rule("{name: overfit, consecutive: 3, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}")
    train, ev = key("train/loss"), key("eval/loss")
    evals = {0: 2.0, 2: 2.0, 4: 1.0, 6: 2.0, 8: 2.0, 10: 2.0}  # eval every other step
    data = [Sample(train, s * 10.0, s, 1.0) for s in range(11)]
    data += [Sample(ev, s * 10.0 + 1, s, v) for s, v in evals.items()]
    got = replayed([r], [sorted(data, key=lambda s: s.time)])
    assert [(t[2], t[3]) for t in got] == [("firing", 10)]  # steps 6, 8, 10: the third in a row


def test_for_waits_for_the_data_of_every_series_until_the_run_is_known_finished() -> None:
    r = rule("{name: overfit, for: 10s, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}")
    train, ev = key("train/loss"), key("eval/loss")
    data = [Sample(ev, 1.0, 1, 5.0), Sample(train, 2.0, 1, 1.0), Sample(ev, 3.0, 2, 5.0)]
    # step 1 holds from time 1; whether step 2 (time 3) holds is not known until train reaches it: the
    # alert stays pending however late it is, as it would if train's step 2 came at once
    assert [(t[2], t[0]) for t in replayed([r], [data], until=100.0)] == [("pending", 1.0)]
    assert [(t[2], t[0]) for t in replayed([r], [[*data, Sample(train, 4.0, 2, 1.0)]], until=100.0)] == [
        ("pending", 1.0),
        ("firing", 11.0),
    ]
    assert [(t[2], t[0]) for t in replayed([r], [[*data, Sample(train, 4.0, 2, 9.0)]], until=100.0)] == [
        ("pending", 1.0),
        ("inactive", 3.0),
    ]
    # the run ends without train ever reaching step 2: step 2 is not judged, and time goes on; the alert
    # of a run that has ended resolves at its end
    done = [*data, Sample(key("run.finished"), 50.0, None, 1.0)]
    assert [(t[2], t[0]) for t in replayed([r], [done], until=100.0)] == [
        ("pending", 1.0),
        ("firing", 11.0),
        ("resolved", 50.0),
    ]


def test_an_unchanged_expr_rule_keeps_its_place_across_a_reload() -> None:
    rules = [rule(RATIO)]
    ruleset, buffer = RuleSet(rules), SeriesBuffer(BufferLimits(max_age=1e9))
    train, ev = key("train/loss"), key("eval/loss")
    buffer.append([Sample(train, 1.0, 1, 1.0), Sample(ev, 2.0, 1, 2.0), Sample(train, 3.0, 2, 1.0)], 3.0)
    first = evaluate(ruleset, buffer, 3.0, EvalState())
    assert [t.step for t in first.transitions] == [1]
    reloaded = RuleSet([rule(RATIO)])
    state, kept = carry_over(first.state, ruleset, reloaded, buffer)
    assert kept == {"overfit"}
    buffer.append([Sample(ev, 4.0, 2, 1.0), Sample(train, 5.0, 3, 1.0), Sample(ev, 6.0, 3, 2.0)], 6.0)
    second = evaluate(reloaded, buffer, 6.0, state)
    assert [(t.state.value, t.step) for t in second.transitions] == [("resolved", 2), ("firing", 3)]


def test_a_changed_expr_rule_starts_from_now_after_a_reload() -> None:
    old = RuleSet([rule(RATIO.replace("1.5", "3"))])
    buffer = SeriesBuffer(BufferLimits(max_age=1e9))
    train, ev = key("train/loss"), key("eval/loss")
    buffer.append([Sample(train, 1.0, 1, 1.0), Sample(ev, 2.0, 1, 2.0)], 2.0)
    first = evaluate(old, buffer, 2.0, EvalState())
    assert first.transitions == ()
    new = RuleSet([rule(RATIO)])
    state, kept = carry_over(first.state, old, new, buffer)
    assert kept == set()
    buffer.append([Sample(train, 3.0, 2, 1.0), Sample(ev, 4.0, 2, 1.0)], 4.0)
    buffer.append([Sample(train, 5.0, 3, 1.0), Sample(ev, 6.0, 3, 2.0)], 6.0)
    second = evaluate(new, buffer, 6.0, state)  # step 1 (ratio 2) is the past: not judged; 2 and 3 are new
    assert [(t.state.value, t.step) for t in second.transitions] == [("firing", 3)]


def test_after_a_restart_an_expr_alert_goes_on_from_the_step_it_last_judged() -> None:
    ruleset, buffer = RuleSet([rule(RATIO)]), SeriesBuffer(BufferLimits(max_age=1e9))
    train, ev = key("train/loss"), key("eval/loss")
    buffer.append([Sample(train, 1.0, 1, 1.0), Sample(ev, 2.0, 1, 2.0)], 2.0)
    first = evaluate(ruleset, buffer, 2.0, EvalState())
    assert [(t.state.value, t.step) for t in first.transitions] == [("firing", 1)]
    fresh = SeriesBuffer(BufferLimits(max_age=1e9))  # the service restarted: its tracks were saved
    state = restored({p: tr.copy() for p, tr in first.state.tracks.items()}, ruleset, fresh)
    fresh.append([Sample(train, 5.0, 2, 1.0), Sample(ev, 6.0, 2, 1.0)], 6.0)
    second = evaluate(ruleset, fresh, 6.0, state)
    assert [(t.state.value, t.step) for t in second.transitions] == [("resolved", 2)]  # step 1 not judged again


def test_config_errors_have_their_places(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        "rules:\n"
        "  - {name: a, condition: {expr: 'eval/loss / train/loss > 1.5'}}\n"
        "  - {name: b, metric: loss, condition: {expr: 'loss > 1'}}\n"
        "  - {name: c, condition: '> 1'}\n"
        "  - {name: d, condition: {expr: 'a + b'}}\n"
        "  - {name: e, condition: {expr: [a]}}\n"
        f"  - {{name: f, condition: {{expr: '{'(' * 5000}a > 1'}}}}\n"
        "  - {name: g, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config([str(path)], {})
    got = [str(p).split(": ", 1)[1] for p in info.value.problems]
    assert got == [
        "rules[0].condition.expr: column 1: write the metric name in backquotes (`eval/loss`), or a division with "
        "spaces (eval / ...)",
        "rules[1]: an expr condition names its metrics itself: leave `metric` out",
        "rules[2]: `metric` is required (a name, a glob such as train/*, or a list of them)",
        "rules[3].condition.expr: the expression must be a test (`a / b > 1.5`, isnan(a), ...), not a number",
        'rules[4].condition.expr: expr is a string such as "`eval/loss` / `train/loss` > 1.5", got list',
        "rules[5].condition.expr: the expression is 5005 characters long; at most 2000",
    ]
    assert [p.line for p in info.value.problems] == [2, 3, 4, 5, 6, 7]


# -- properties: the answer is the naive join's, however the samples are batched

NAMES = ("train/loss", "eval/loss")
PROPERTY_RULES = [
    rule("{name: ratio, condition: {expr: '`eval/loss` / `train/loss` > 1.5'}}"),
    rule(
        "{name: held, for: 20s, keep_firing_for: 15s, consecutive: 2, "
        "condition: {expr: '`eval/loss` > 2 or isnan(`train/loss`)'}}"
    ),
]
values = st.one_of(st.floats(0, 4), st.sampled_from([math.nan, math.inf, 0.0]))
stream = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(NAMES), st.integers(0, 3), st.integers(1, 20), values),
    min_size=1,
    max_size=60,
)


def build(spec: list[tuple[str, str, int, int, float]]) -> list[Sample]:
    """Samples in time order; each series' steps go up by 0 to 3 (a repeated step: the first one counts)."""
    t, steps, out = 0.0, {}, []
    for run, metric, dstep, gap, v in spec:
        t += gap
        k = key(metric, run)
        steps[k] = steps.get(k, 0) + dstep
        out.append(Sample(k, t, steps[k], v))
    return out


def naive(data: list[Sample]) -> list[tuple[float, str, int, float]]:
    """The `ratio` rule's transitions by a naive join: every (run, step) both series have, in step order."""
    first: dict[tuple[str, str, int], Sample] = {}
    for s in data:
        first.setdefault((s.series.label("run") or "", s.series.metric, s.step or 0), s)
    out = []
    for run in ("a", "b"):
        both = sorted(
            {st for (r, m, st) in first if r == run and m == NAMES[0]}
            & {st for (r, m, st) in first if r == run and m == NAMES[1]}
        )
        firing = False
        for step in both:
            e, tr = first[(run, "eval/loss", step)], first[(run, "train/loss", step)]
            if tr.value != 0:
                ratio = e.value / tr.value
            else:
                ratio = math.nan if e.value != e.value or e.value == 0 else math.copysign(math.inf, e.value)
            hit = ratio == ratio and ratio > 1.5
            if hit != firing:
                out.append((e.time, "firing" if hit else "resolved", step, ratio))
                firing = hit
    return sorted(out)


def test_a_for_that_ends_at_the_time_of_a_waiting_step_gives_one_answer_however_samples_arrive() -> None:
    """Found by the property below: `held` (for: 20s) pending since t=6; eval/loss's step 5 comes at t=26 and
    waits for train/loss's (t=27). Sample by sample, the alert used to go through t=26 first and fire; in one
    batch, step 5 (judged at t=26) came first. A sample goes before a time-based change at the same instant
    (as for every rule): the waiting step's instant is not passed before it is judged."""
    spec = [
        ("a", "train/loss", 0, 1, 0.0),
        ("a", "train/loss", 1, 1, 0.0),
        ("a", "train/loss", 1, 1, math.nan),
        ("a", "train/loss", 2, 1, 0.0),
        ("a", "eval/loss", 1, 1, 3.0),
        ("a", "eval/loss", 1, 1, 0.0),
        ("a", "eval/loss", 3, 20, 0.0),
        ("a", "train/loss", 1, 1, 0.0),
    ]
    data = build(spec)
    one_by_one = replayed(PROPERTY_RULES, [[s] for s in data], 27.0)
    assert replayed(PROPERTY_RULES, [data], 27.0) == one_by_one
    held = [(t[0], t[2], t[3]) for t in one_by_one if t[1] == "held"]
    assert held == [(6.0, "pending", 2), (26.0, "inactive", 5)]


@settings(max_examples=150, deadline=None)
@given(spec=stream, cuts=st.lists(st.integers(0, 60), max_size=6), tail=st.integers(0, 100))
def test_batched_or_sample_by_sample_the_transitions_are_the_naive_joins(spec, cuts, tail) -> None:  # type: ignore[no-untyped-def]
    data = build(spec)
    until = data[-1].time + tail
    one_by_one = replayed(PROPERTY_RULES, [[s] for s in data], until)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    assert replayed(PROPERTY_RULES, [data], until) == one_by_one
    assert replayed(PROPERTY_RULES, [data[a:b] for a, b in itertools.pairwise(points)], until) == one_by_one
    ratio = [(t[0], t[2], t[3], t[4]) for t in one_by_one if t[1] == "ratio"]
    assert ratio == [(time, state, step, format_value(v)) for time, state, step, v in naive(data)]
