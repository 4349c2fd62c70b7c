"""`EvalState.alerts` with the service's memo (alerts made once per track, the last call's order taken again while
the same pairs alert under the same rules) against the same call without one (every alert made, sorted by rule
and labels): the same list, evaluation after evaluation, as alerts fire, resolve and come back (among up to 120
firing all along) and the rules are reloaded (new rule objects, some with a changed label on their alerts)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import SeriesBuffer
from alertd.config import RuleConfig
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import RuleSet, evaluate
from alertd.rules.evaluate import AlertMemo

RUNS = ["a", "b", "c", "d", "e"]
METRICS = ["loss", "grad_norm"]


def ruleset(team: str) -> RuleSet:
    """Two rules; the second puts the label `team` on its alerts."""
    return RuleSet(
        [
            RuleConfig.model_validate({"name": "high", "metric": "*", "condition": "> 5"}).build(),
            RuleConfig.model_validate(
                {"name": "hi", "metric": "loss", "condition": "> 7", "labels": {"team": team}}
            ).build(),
        ]
    )


@settings(max_examples=150, deadline=None)
@given(
    ticks=st.lists(
        st.tuples(
            st.lists(st.tuples(st.sampled_from(RUNS), st.sampled_from(METRICS), st.sampled_from([1.0, 6.0, 9.0]))),
            st.sampled_from(["keep", "keep", "keep", "reload", "relabel"]),
        ),
        min_size=1,
        max_size=12,
    ),
    background=st.integers(0, 60),
    in_place=st.booleans(),
)
def test_the_memo_gives_what_a_fresh_sorted_call_gives(
    ticks: list[tuple[list[tuple[str, str, float]], str]], background: int, in_place: bool
) -> None:
    """`in_place`: as the service evaluates (a steadily firing alert's new sample makes its track a new one, so the
    memo makes its alert again, with the new value)."""
    buf = SeriesBuffer()
    rules, team = ruleset("x"), "x"
    memo = AlertMemo()
    # `background` runs firing all along, their names between the ticks' runs ("a" < "a0" < "b" < "b1" ...): the
    # alerts that come and go in the ticks are then few beside those already in the last order, and are put in
    # their places in it (not sorted again with the rest)
    firing = [f"{RUNS[k % len(RUNS)]}{k}" for k in range(background)]
    buf.append([Sample(SeriesKey("loss", make_labels({"source": "s", "run": run})), 0.0, 0, 9.0) for run in firing])
    state = evaluate(rules, buf, 0.0).state
    assert len(state.alerts(rules.rules, memo)) == 2 * background
    for i, (samples, change) in enumerate(ticks):
        if change == "reload":
            rules = ruleset(team)  # the same rules, new objects
        elif change == "relabel":
            team = "a" if team == "x" else "x"
            rules = ruleset(team)
        t = float(i + 1)
        buf.append([Sample(SeriesKey(m, make_labels({"source": "s", "run": run})), t, i, v) for run, m, v in samples])
        state = evaluate(rules, buf, t, state, in_place=in_place).state
        with_memo = state.alerts(rules.rules, memo)
        assert with_memo == state.alerts(rules.rules)
        assert with_memo == sorted(with_memo, key=lambda a: (a.rule, a.labels))
