"""Core figures: bytes per buffered sample, and the cost of one evaluation tick.

    python bench/bench_core.py

Tick: 10,000 series (1,000 runs x 10 metrics) under eight classic default rules plus two more (10 rules), each
series receiving one new sample per tick, evaluated as the service's engine does (`in_place`: the previous state
is not kept; the quiet and steadily firing pairs parked and judged column-wise on the buffer's inbox,
`alertd.rules.parking`); measured with 100 and with 1,000 samples of history per
series, to show that the cost follows the new samples and not the history. Beside it, the same ticks with every pair
stepped in Python (`park=False`, the engine before parking). Its anchor, the numpy floor: the same ten conditions
computed column-wise on the tick's new samples from the buffer (the new values gathered by key into one array, each
rule's comparison on its series' slice, the spike baselines as medians over each series' last 50 values and the
throughput one over its last 300, a row per series, the rising test against the previous value): what an engine
that judges every new sample afresh does at least (the parked pairs' tick does less: its inbox needs no gathering by
key, and a spike's bound settles it where a median is not needed). As in the service, the objects alive once the
buffer is filled and first evaluated (its start-up read) are frozen out of the collector's passes
(`alertd.service.heap`). Beside the median tick, the slowest after the first (which builds the windows' running
state): the values cycle over 7 steps, so the 2,000 `val_metric_rising` pairs fire together every seventh tick and
resolve together on another (2,000 transitions, their summaries rendered).

By rule (with 100 samples of history): each of the ten rules alone on its own buffer, the same ticks, above a tick
with no rule at all: where the tick goes (each rule alone also pays for the rows of its series, so the ten add up to
more than the whole tick).

Append and tick together: what the service pays for a tick's samples, as it evaluates (the inbox written by the
append, the pairs parked) beside every pair stepped with no inbox, in turns on two buffers. And a tick of three new
samples per series (a source that reads a few steps at a time: each series' rows judged in order), both ways.

Append: `SeriesBuffer.append` of one tick's samples (one for each series), its inbox open as the service's is (each
sample's row written for the parked pairs' column-wise tick, `alertd.inbox`), beside a plain loop appending them to
each series' arrays: what the service pays before each such tick.

Windows: the same 10,000 series and ticks under five windowed rules (avg over 20 samples, a zscore over 100,
a quantile over 100, a plateau, an avg over 5m; each on one metric, so 5,000 pairs), beside five threshold
rules on the same metrics, timed in turns on the same buffer and ticks, and their ratio (target: within 2x, set on
every pair stepped); the start-up objects frozen as for the tick. Then the same as the service evaluates: the steady
pairs parked and judged column-wise (`alertd.rules.parking`: the thresholds, the avgs and the quantile; the zscore
and the plateau are never parked).
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.config import RuleConfig, load_config
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import RuleSet, evaluate
from alertd.service.heap import HeapFreezer

METRICS = [
    "train/loss", "train/grad_norm", "eval/loss", "train/tokens_per_second", "train/learning_rate",
    "gpu.utilization", "gpu.temperature", "gpu.memory.used", "train/epoch", "eval/perplexity",
]  # fmt: skip


def keys(runs: int) -> list[SeriesKey]:
    return [
        SeriesKey(m, make_labels({"source": "tb", "run": f"exp{r}", "host": "node1", "gpu": str(r % 8)}))
        for r in range(runs)
        for m in METRICS
    ]


def value(metric: str, i: int) -> float:
    return {"gpu.utilization": 95.0, "gpu.temperature": 70.0, "train/grad_norm": 1.0}.get(metric, 2.0 + (i % 7) * 0.01)


def bytes_per_sample() -> None:
    series, per = keys(100), 1000
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buf = SeriesBuffer(BufferLimits(max_samples=per, max_age=1e9))
    for i in range(per):
        buf.append([Sample(k, float(i), i, value(k.metric, i)) for k in series])
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    n = buf.sample_count()
    print(
        f"buffer memory: {(after - before) / n:.1f} bytes per buffered sample "
        f"({n} samples in {len(series)} series, all overhead included; target <= 64)"
    )


CLASSIC = (
    "loss_not_finite",
    "grad_norm_exploding",
    "grad_norm_not_finite",
    "loss_spike",
    "throughput_drop",
    "val_metric_rising",
    "gpu_underutilized",
    "gpu_hot",
)
"""The default rules this figure has always been measured with (named: new default rules don't change it)."""


WINDOWED = (
    ("train/loss", {"avg": {"over": "20 samples"}, "op": ">", "value": 100}),
    ("train/grad_norm", {"zscore": {"over": "100 samples", "threshold": 4}}),
    ("train/tokens_per_second", {"quantile": {"over": "100 samples", "q": 0.9}, "op": ">", "value": 1e9}),
    ("eval/loss", {"plateau": {"patience": 5}}),
    ("gpu.temperature", {"avg": {"over": "5m"}, "op": ">", "value": 83}),
)
"""One windowed rule per metric; `threshold_rules` puts a threshold on each of the same metrics."""


def window_rules() -> RuleSet:
    return RuleSet([RuleConfig.model_validate({"name": f"w{i}", "metric": m, "condition": c}).build()
                    for i, (m, c) in enumerate(WINDOWED)])  # fmt: skip


def threshold_rules() -> RuleSet:
    return RuleSet([RuleConfig.model_validate({"name": f"t{i}", "metric": m, "condition": "> 1e9"}).build()
                    for i, (m, _) in enumerate(WINDOWED)])  # fmt: skip


def classic_rules() -> RuleSet:
    cfg = load_config(["rules/default.yaml"], {})
    by_name = {r.name: r for r in cfg.rules}
    extra = [
        RuleConfig.model_validate(r).build()
        for r in (
            {"name": "lr_zero", "metric": "*learning_rate", "condition": "<= 0"},
            {"name": "loss_absent", "metric": ["loss", "train/loss"], "condition": {"absent": "10m"}},
        )
    ]
    ruleset = RuleSet([*(by_name[n] for n in CLASSIC), *extra])  # Eight classic default rules and two more.
    assert len(ruleset.rules) == 10
    return ruleset


def filled(history: int) -> tuple[list[SeriesKey], SeriesBuffer]:
    """The 10,000 series with `history` samples each (one a second)."""
    series = keys(1000)
    buf = SeriesBuffer(BufferLimits(max_samples=max(history, 64) + 16, max_age=1e9))
    buf.append([Sample(k, 0.0, 0, value(k.metric, 0)) for k in series])
    for k in series:  # Fill the history straight into the arrays: quicker than 10 M Sample objects.
        s = buf.get(k)
        assert s is not None
        s.times.extend(float(t) for t in range(1, history))
        s.values.extend(value(k.metric, t) for t in range(1, history))
        s.steps.extend(range(1, history))
    return series, buf


def numpy_floor(history: int) -> float:
    """Milliseconds the numpy floor takes for one tick (median of 15)."""
    import numpy as np

    series, buf = filled(history)
    by_metric: dict[str, list[SeriesKey]] = {}
    for k in series:
        by_metric.setdefault(k.metric, []).append(k)
    took = []
    for t in range(history, history + 15):
        buf.append([Sample(k, float(t), t, value(k.metric, t)) for k in series])
        start = time.perf_counter()
        cols = {m: [buf.get(k) for k in ks] for m, ks in by_metric.items()}
        new = {m: np.fromiter((s.values[-1] for s in ss if s), float) for m, ss in cols.items()}
        _ = ~np.isfinite(new["train/loss"]), new["train/grad_norm"] > 100, ~np.isfinite(new["train/grad_norm"])
        _ = new["gpu.utilization"] < 40, new["gpu.temperature"] > 83, new["train/learning_rate"] <= 0
        for metric, width, ratio in (("train/loss", 50, 2.0), ("train/tokens_per_second", 300, 0.5)):
            rows = np.array([np.frombuffer(s.values, float)[-width - 1 : -1] for s in cols[metric] if s])
            base = np.median(rows, axis=1)
            _ = new[metric] / base >= ratio
        prev = np.fromiter((s.values[-2] for s in cols["eval/loss"] if s), float)
        _ = new["eval/loss"] > prev
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


def tick_cost(history: int, ruleset: RuleSet | None = None, park: bool = True) -> tuple[float, float, float, float]:
    """Milliseconds: the median tick (of 15) with one new sample per series, the slowest but the first (which builds
    the windows' running state, as the service's first after its start-up read), the median tick with none; and the
    rule-series pairs. `park`: as the service (`evaluate`'s `park`)."""
    ruleset = ruleset or classic_rules()
    series, buf = filled(history)
    state = evaluate(ruleset, buf, float(history - 1)).state
    HeapFreezer().started(True, len(buf))  # the start-up read over: its objects out of the collector's passes
    times, idle = [], []
    for t in range(history, history + 15):
        batch = [Sample(k, float(t), t, value(k.metric, t)) for k in series]
        buf.append(batch)
        start = time.perf_counter()
        state = evaluate(ruleset, buf, float(t), state, in_place=True, park=park).state
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        state = evaluate(ruleset, buf, t + 0.5, state, in_place=True, park=park).state
        idle.append(time.perf_counter() - start)
    gc.unfreeze()
    pairs = sum(len(ruleset.for_series(k)) for k in series)
    return statistics.median(times) * 1000, max(times[1:]) * 1000, statistics.median(idle) * 1000, pairs


def tick_by_rule(history: int) -> tuple[float, list[tuple[str, float, int]]]:
    """Where the tick goes, rule by rule: milliseconds of the median tick with no rule at all, and for each of the ten
    rules evaluated alone (`tick_cost` on its own buffer), the milliseconds above that empty tick and its pairs. A
    rule alone pays for its series' visit too, so the ten add up to more than the whole tick."""
    base = tick_cost(history, RuleSet([]))[0]
    out = []
    for rule in classic_rules().rules:
        busy, _, _, pairs = tick_cost(history, RuleSet([rule]))
        out.append((rule.name, busy - base, pairs))
    return base, out


def append_cost(history: int) -> tuple[float, float]:
    """Milliseconds (median of 15): `SeriesBuffer.append` of a tick's samples (one for each of the 10,000 series), and
    its anchor, a plain loop appending the same samples to each series' three arrays (found by key, as the buffer
    must): the least any Python buffer does. The two in turns, each on its own buffer."""
    series, buf = filled(history)
    buf.open_inbox()  # as the service's, whose evaluations park pairs (`alertd.inbox`)
    _, plain = filled(history)
    arrays = {k: (s.times, s.values, s.steps) for k in series if (s := plain.get(k)) is not None}
    took: tuple[list[float], list[float]] = ([], [])
    for t in range(history, history + 15):
        batch = [Sample(k, float(t), t, value(k.metric, t)) for k in series]
        start = time.perf_counter()
        buf.append(batch)
        took[0].append(time.perf_counter() - start)
        start = time.perf_counter()
        for sample in batch:
            times, values, steps = arrays[sample.series]
            times.append(sample.time)
            values.append(sample.value)
            steps.append(sample.step)
        took[1].append(time.perf_counter() - start)
    return statistics.median(took[0]) * 1000, statistics.median(took[1]) * 1000


def paired_cost(history: int, per: int = 1, append: bool = True) -> tuple[float, float]:
    """Milliseconds (median of 15 ticks of `per` new samples per series), as the service evaluates (its buffer's inbox
    open, its pairs parked) and with every pair stepped (no inbox), in turns, each on its own buffer: the append and
    the tick together (`append`), or the tick alone."""
    ruleset = classic_rules()
    chains = []
    for park in (True, False):
        series, buf = filled(history)
        chains.append((park, buf, [evaluate(ruleset, buf, float(history - 1)).state], []))
    HeapFreezer().started(True, 2 * len(chains[0][1]))
    t0 = history
    for tick in range(15):
        batch = [Sample(k, float(t), t, value(k.metric, t)) for t in range(t0, t0 + per) for k in series]
        for park, buf, state, took in chains if tick % 2 else reversed(chains):
            start = time.perf_counter()
            buf.append(batch)
            if not append:
                start = time.perf_counter()
            state[0] = evaluate(ruleset, buf, float(t0 + per - 1), state[0], in_place=True, park=park).state
            took.append(time.perf_counter() - start)
        t0 += per
    gc.unfreeze()
    return statistics.median(chains[0][3]) * 1000, statistics.median(chains[1][3]) * 1000


def window_tick_cost(history: int, park: bool = True) -> tuple[float, float, float, int]:
    """The window rules and the threshold rules on the same buffer, timed tick by tick, one right after the
    other (in turns, first one then the other first), so that a busy machine slows both alike: the median
    tick of each and the median of the per-tick ratios. `park`: as the service evaluates (quiet and steady pairs
    parked, judged column-wise); else every pair stepped in Python (`evaluate`'s `park=False`)."""
    rulesets = {"window": window_rules(), "threshold": threshold_rules()}
    series, buf = filled(history)
    states = {name: evaluate(rs, buf, float(history - 1)).state for name, rs in rulesets.items()}
    HeapFreezer().started(True, len(buf))  # as `tick_cost`
    took: dict[str, list[float]] = {name: [] for name in rulesets}
    for t in range(history, history + 21):
        buf.append([Sample(k, float(t), t, value(k.metric, t)) for k in series])
        order = list(rulesets) if t % 2 else list(reversed(rulesets))
        for name in order:
            start = time.perf_counter()
            states[name] = evaluate(rulesets[name], buf, float(t), states[name], in_place=True, park=park).state
            took[name].append(time.perf_counter() - start)
    gc.unfreeze()
    ratios = [w / th for w, th in zip(took["window"], took["threshold"], strict=True)]
    pairs = sum(len(rulesets["window"].for_series(k)) for k in series)
    assert pairs == sum(len(rulesets["threshold"].for_series(k)) for k in series)
    median = statistics.median
    return median(took["window"]) * 1000, median(took["threshold"]) * 1000, median(ratios), pairs


def main() -> None:
    bytes_per_sample()
    for history in (100, 1000):
        busy, slowest, idle, pairs = tick_cost(history)
        stepped, stepped_slowest, _, _ = tick_cost(history, park=False)
        floor = numpy_floor(history)
        print(
            f"evaluation tick: {busy:.1f} ms for 10000 series x 10 rules, one new sample per series "
            f"({pairs} rule-series pairs, {history} samples of history; target <= 100 ms, goal <= 10 ms); "
            f"tick without new samples: {idle:.1f} ms; the numpy floor of the same conditions {floor:.2f} ms "
            f"({busy / floor:.1f}x); the slowest tick after the first {slowest:.0f} ms (the 2,000 rising pairs fire or "
            f"resolve together every few ticks); every pair stepped (no parking): {stepped:.1f} ms, the slowest "
            f"{stepped_slowest:.0f} ms ({stepped / busy:.1f}x the tick)"
        )
        if history == 100:
            base, parts = tick_by_rule(history)
            shown = ", ".join(f"{name} {ms:.1f} ms ({ms / pairs * 1000:.1f} us x {pairs})" for name, ms, pairs in parts)
            print(
                f"evaluation tick by rule, each alone on its own buffer ({history} samples of history), above a tick "
                f"with no rule ({base:.1f} ms): {shown}; together {sum(ms for _, ms, _ in parts):.1f} ms"
            )
        appended, loop = append_cost(history)
        print(
            f"buffer append of a tick's samples: {appended:.1f} ms for 10000 series x 1 sample ({history} samples of "
            f"history); a plain loop appending them to each series' arrays {loop:.1f} ms ({appended / loop:.1f}x)"
        )
        parked, stepped = paired_cost(history)
        print(
            f"append and tick together, 10000 series x 10 rules ({history} samples of history): {parked:.1f} ms as the "
            f"service evaluates (its inbox written, pairs parked); every pair stepped, no inbox: {stepped:.1f} ms "
            f"({stepped / parked:.1f}x)"
        )
        if history == 100:
            parked, stepped = paired_cost(history, 3, append=False)
            print(
                f"evaluation tick, 3 new samples per series (30000 samples; the 2,000 rising pairs fire or resolve at "
                f"every tick): {parked:.1f} ms as the service evaluates; every pair stepped: {stepped:.1f} ms "
                f"({stepped / parked:.1f}x)"
            )
    for history in (300, 1000):
        windowed, threshold, ratio, pairs = window_tick_cost(history, park=False)
        print(
            f"window rules tick, every pair stepped: {windowed:.1f} ms for 10000 series, {pairs} pairs under avg/20 "
            f"samples, zscore/100, quantile/100, plateau, avg/5m; the same metrics under thresholds: "
            f"{threshold:.1f} ms; ratio {ratio:.2f}x ({history} samples of history; target <= 2x)"
        )
        windowed, threshold, ratio, _ = window_tick_cost(history)
        print(
            f"window rules tick, as the service evaluates (steady pairs parked, judged column-wise): "
            f"{windowed:.1f} ms; the thresholds {threshold:.1f} ms; ratio {ratio:.2f}x ({history} samples of history; "
            f"the zscore and plateau pairs are never parked)"
        )


if __name__ == "__main__":
    main()
