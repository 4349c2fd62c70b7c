"""Time tables for `peers`: a series against the other series of its group (the ranks of a job)."""

from __future__ import annotations

import math
from statistics import median

import pytest
from core_helpers import INF, NAN, rule
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from alertd.buffer import BufferLimits
from alertd.config import parse_condition
from alertd.config.conditions import ConditionError
from alertd.dryrun import Replay
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import RuleSet

METRIC = "train/step_time"


def rank(r: int, run: str = "r1") -> SeriesKey:
    return SeriesKey(METRIC, make_labels({"source": "s", "run": run, "rank": str(r)}))


def ranks(rows: dict[SeriesKey, list[float]], every: float = 10.0) -> list[Sample]:
    """Each series' values at 0, every, 2*every, ... (steps 0, 1, ...); NaN in a list: no sample then, when
    written as None."""
    return [Sample(k, i * every, i, v) for k, vs in rows.items() for i, v in enumerate(vs) if v is not None]


def transitions(rules: list[str], data: list[Sample], until: float, batch: int = 1) -> list[tuple[float, str, str]]:
    """(time, state, rank) of every transition, feeding `batch` samples at a time in time order."""
    replay = Replay(RuleSet([rule(r) for r in rules]), BufferLimits())
    data = sorted(data, key=lambda s: s.time)
    out = []
    for i in range(0, len(data), batch):
        out += replay.feed(data[i : i + batch]).transitions
    out += replay.advance(until).transitions
    return [(t.time, t.state.value, dict(t.labels).get("rank", "")) for t in out]


STRAGGLER = (
    "{name: straggler, metric: train/step_time,"
    " condition: {peers: {by: [source, run], stat: median, over: 30s, ratio: '> 1.5'}}, for: 60s}"
)


def test_the_straggler_is_named_and_no_other() -> None:
    slow = [2.0] * 10 + [1.0] * 10  # rank 3 twice as slow for 100s, then back
    data = ranks({rank(0): [1.0] * 20, rank(1): [1.1] * 20, rank(2): [0.9] * 20, rank(3): slow})
    # pending at 0; the mean over 30s of rank 3 at 110 is (2 + 1 + 1) / 3 = 1.33: back under 1.5
    assert transitions([STRAGGLER], data, until=300) == [
        (0.0, "pending", "3"),
        (60.0, "firing", "3"),
        (110.0, "resolved", "3"),
    ]


def test_same_answer_in_any_batches() -> None:
    slow = [1.0] * 5 + [3.0] * 10 + [1.0] * 5
    data = ranks({rank(0): [1.0] * 20, rank(1): [1.0] * 20, rank(2): slow})
    one = transitions([STRAGGLER], data, until=300)
    assert one == transitions([STRAGGLER], data, until=300, batch=7) == transitions([STRAGGLER], data, 300, 1000)
    assert [s for _, s, _ in one] == ["pending", "firing", "resolved"]


def test_for_not_reached_goes_back_to_inactive() -> None:
    slow = [1.0] * 5 + [3.0] * 3 + [1.0] * 12  # slow for 30s: its mean over 30s is above 1.5 from 50 to 90 (at 90: 5/3)
    data = ranks({rank(0): [1.0] * 20, rank(1): [1.0] * 20, rank(2): slow})
    assert transitions([STRAGGLER], data, until=300) == [(50.0, "pending", "2"), (100.0, "inactive", "2")]


def test_a_group_of_one_is_not_judged_and_runs_do_not_mix() -> None:
    data = ranks({rank(0, "r1"): [5.0] * 10, rank(0, "r2"): [1.0] * 10})  # one rank per run
    assert transitions([STRAGGLER], data, until=200) == []


def test_nan_and_inf_are_left_out_and_a_nan_series_never_fires() -> None:
    data = ranks(
        {
            rank(0): [1.0] * 12,
            rank(1): [1.0, INF] * 6,  # its mean is that of its finite values: 1.0
            rank(2): [NAN] * 12,  # no value: neither judged nor in the median
            rank(3): [4.0] * 12,
        }
    )
    # the median of 1, 1, 4 is 1: rank 3 only; its last sample (110) leaves its window at 140
    assert transitions([STRAGGLER], data, until=200) == [
        (0.0, "pending", "3"),
        (60.0, "firing", "3"),
        (140.0, "resolved", "3"),
    ]
    alone = ranks({rank(0): [1.0] * 12, rank(2): [NAN] * 12})  # one rank with a value: not judged
    assert transitions([STRAGGLER], alone, until=200) == []


SILENT = "{{name: stalled, metric: train/step_time, condition: {{peers: {{by: [run], silent: 30s, count: '{c}'}}}}}}"


def test_k_of_n_silent_names_each_silent_rank() -> None:
    stop = [1.0] * 6 + [None] * 10  # last sample at 50
    data = ranks({rank(0): [1.0] * 16, rank(1): [1.0] * 16, rank(2): stop, rank(3): stop})  # type: ignore[dict-item]
    assert transitions([SILENT.format(c=">= 2")], data, until=170) == [(80.0, "firing", "2"), (80.0, "firing", "3")]
    assert transitions([SILENT.format(c=">= 3")], data, until=170) == []
    # once every rank is silent (the last samples at 150, + 30s) nothing is judged: the alerts resolve
    assert transitions([SILENT.format(c=">= 1")], data, until=300) == [
        (80.0, "firing", "2"),
        (80.0, "firing", "3"),
        (180.0, "resolved", "2"),
        (180.0, "resolved", "3"),
    ]


def test_one_silent_rank_of_two_and_its_return() -> None:
    gap = [1.0] * 3 + [None] * 5 + [1.0] * 4  # no sample from 30 to 70
    data = ranks({rank(0): [1.0] * 12, rank(1): gap})  # type: ignore[dict-item]
    assert transitions([SILENT.format(c=">= 1")], data, until=110) == [(50.0, "firing", "1"), (80.0, "resolved", "1")]


def test_alert_labels_name_the_rank() -> None:
    replay = Replay(RuleSet([rule(STRAGGLER.replace("for: 60s", "for: 0s"))]), BufferLimits())
    replay.feed(ranks({rank(0): [1.0] * 3, rank(1): [1.0] * 3, rank(2): [9.0] * 3}))
    alerts = replay.advance(25).state.alerts(replay.ruleset.rules)
    assert [dict(a.labels)["rank"] for a in alerts] == ["2"]
    assert dict(alerts[0].labels)["metric"] == METRIC and alerts[0].value == 9.0


@pytest.mark.parametrize(
    ("options", "place", "words"),
    [
        ("{by: [run], ratio: '> 1.5'}", "peers.over", "ratio needs over"),
        ("{by: [run], over: 1m}", "peers", "either ratio"),
        ("{by: [run], over: 1m, ratio: '> 1.5', silent: 2m}", "peers", "either ratio"),
        ("{by: [run], over: 1m, ratio: 'big'}", "peers.ratio", "a comparison with a number"),
        ("{by: [run], over: 1m, ratio: '> 1.5', stat: mode}", "peers.stat", "'max', 'min', 'avg' or 'median'"),
        ("{by: [], silent: 2m}", "peers.by", "at least 1"),
        ("{by: [run, run], silent: 2m}", "peers.by", "named twice"),
        ("{by: [run], silent: 2m, count: 'some'}", "peers.count", "a whole number"),
        ("{by: [run], silent: 0s}", "peers.silent", "above zero"),
        ("{by: [run], silent: 2m, over: 1m}", "peers.over", "goes with ratio"),
        ("{by: [run], silent: 2m, rato: 1}", "peers.rato", "ratio"),
    ],
)
def test_config_errors_name_the_place(options: str, place: str, words: str) -> None:
    import yaml

    with pytest.raises(ConditionError) as err:
        parse_condition({"peers": yaml.safe_load(options)})
    assert f"{place}: " in str(err.value) and words in str(err.value)


def test_consecutive_is_refused() -> None:
    with pytest.raises(ValidationError, match="judged per group"):
        rule("{name: x, metric: m, condition: {peers: {by: [run], silent: 1m}}, consecutive: 2}")


# A from-scratch reference: the condition at every instant where it may change, with plain lists.


def _reference(rows: dict[SeriesKey, list[tuple[float, float]]], silent: bool, span: float, ratio: float, k: int):
    """(time, state, rank) of every transition with `for: 0`, judging every candidate instant from scratch."""
    cands = sorted({t for pts in rows.values() for t, _ in pts} | {t + span for pts in rows.values() for t, _ in pts})
    state = dict.fromkeys(rows, False)
    out = []
    for e in cands:
        tests: dict[SeriesKey, bool] = {}
        seen = {key: [(t, v) for t, v in pts if t <= e] for key, pts in rows.items()}
        seen = {key: pts for key, pts in seen.items() if pts}
        if silent:
            quiet = {key: pts[-1][0] + span <= e for key, pts in seen.items()}
            ok = len(seen) >= 2 and not all(quiet.values())
            tests = {key: ok and q for key, q in quiet.items()}
        else:
            means = {}
            for key, pts in seen.items():
                xs = [v for t, v in pts if e < t + span and math.isfinite(v)]
                if xs:
                    means[key] = math.fsum(xs) / len(xs)
            base = median(means.values()) if len(means) >= 2 else 0.0
            tests = {key: base > 0 and key in means and means[key] / base > ratio for key in seen}
        hold = sum(tests.values()) >= k
        for key in sorted(rows, key=lambda x: x.labels):
            now = hold and tests.get(key, False)
            if now != state[key]:
                state[key] = now
                out.append((e, "firing" if now else "resolved", key.label("rank") or ""))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 40), st.sampled_from([1.0, 1.2, 2.0, 5.0, NAN, INF])), max_size=8),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
    st.sampled_from([5.0, 12.0, 30.0]),
    st.integers(1, 2),
    st.integers(1, 9),
)
def test_matches_a_from_scratch_reference(
    raw: list[list[tuple[int, float]]], silent: bool, span: float, k: int, batch: int
) -> None:
    rows: dict[SeriesKey, list[tuple[float, float]]] = {}
    for r, pts in enumerate(raw):
        by_time = {float(t * 2.5): v for t, v in pts}  # one sample per time and series
        if by_time:
            rows[rank(r)] = sorted(by_time.items())
    data = [Sample(key, t, i, v) for key, pts in rows.items() for i, (t, v) in enumerate(pts)]
    cond = f"silent: {span}" if silent else f"stat: median, over: {span}, ratio: '> 1.5'"
    text = f"{{name: p, metric: {METRIC}, condition: {{peers: {{by: [run], {cond}, count: '>= {k}'}}}}}}"
    got = transitions([text], data, until=1000.0, batch=batch)
    key = sorted  # the same instant's transitions in rank order
    assert key(got) == key(_reference(rows, silent, span, 1.5, k))
