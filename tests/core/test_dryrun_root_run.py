"""`named_root_run`: a TensorBoard logdir's root run (`.`) is named after the logdir in a dry run, each series once."""

from __future__ import annotations

from alertd.dryrun import named_root_run
from alertd.model import Sample, SeriesKey, make_labels


def key(metric: str, run: str) -> SeriesKey:
    return SeriesKey(metric, make_labels({"source": "tb", "run": run}))


def test_the_root_run_is_named_after_the_logdir_with_one_key_per_series() -> None:
    other = key("loss", "exp2")
    samples = [Sample(key(m, "."), float(i), i, 1.0) for i in range(50) for m in ("loss", "lr")]  # a key per sample
    samples += [Sample(other, 99.0, 1, 2.0)]
    out = named_root_run(samples, "myrun")
    assert [(s.time, s.step, s.value) for s in out] == [(s.time, s.step, s.value) for s in samples]
    assert {s.series for s in out} == {key("loss", "myrun"), key("lr", "myrun"), other}
    # each renamed series is one key object for all its samples (the replay groups its samples by key object)
    assert len({id(s.series) for s in out[:-1]}) == 2
    assert out[-1] is samples[-1]  # another run's samples are left as they are
    assert named_root_run(samples, ".") is samples
