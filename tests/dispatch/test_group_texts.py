"""`GroupTexts` (the dispatcher's JSON of its open groups, each alert's part kept while its transition is the same
object) against `group_to_json` (every alert turned into JSON again): the same text, character for character,
call after call, as alerts join, change, leave and come back, and groups go and come back."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.dispatch.codec import GroupTexts, group_from_json, group_to_json
from alertd.model import Transition, TransitionKind, make_labels

RUNS = ["r0", "r1", "r2", "r3", "é\u2028", 'q"uote']
VALUES = [1.0, math.nan, math.inf, -2.5]
TIMES = [0.0, 30.0, math.inf, math.nan, 1e9 + 0.25]


def transition(run: str, value: float, time: float, resolved: bool) -> Transition:
    return Transition(
        rule="loss_not_finite",
        state=TransitionKind.RESOLVED if resolved else TransitionKind.FIRING,
        time=time,
        step=7,
        value=value,
        labels=make_labels({"metric": "train/loss", "run": run, "source": "tb"}),
        severity="critical",
        annotations=(("summary", f"loss of {run}"),),
        active_at=None if resolved else time,
    )


step = st.tuples(
    st.sampled_from(["g1", "g2"]),  # the group changed
    st.lists(  # its alerts: (run, value, time, resolved); an alert left out has left the group
        st.tuples(st.sampled_from(RUNS), st.sampled_from(VALUES), st.sampled_from(TIMES[:3]), st.booleans()),
        max_size=5,
    ),
    st.sampled_from(TIMES),  # next flush
    st.booleans(),  # the group is gone (flushed with nothing left)
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=15))
def test_the_kept_parts_give_group_to_json_s_text(steps: list[tuple[str, list[Any], float, bool]]) -> None:
    texts = GroupTexts()
    made: dict[tuple[str, str, str, bool], Transition] = {}  # the planner keeps a transition until it changes
    for key, alerts, next_flush, gone in steps:
        if gone:
            texts.forget(key)
            continue
        wanted = {}
        for run, value, time, resolved in alerts:
            spec = (run, repr(value), repr(time), resolved)
            t = made.setdefault(spec, transition(run, value, time, resolved))
            wanted[t.fingerprint] = t
        labels = (("rule", "loss_not_finite"), ("team", key))
        got = texts.text(key, "{}", labels, wanted, next_flush)
        assert got == group_to_json("{}", labels, wanted, next_flush)
        json.loads(got)  # strict JSON: no bare NaN
        route, back_labels, back, _ = group_from_json(got)
        assert (route, back_labels, list(back)) == ("{}", labels, list(wanted))
