"""After a restart, what a source reads again that the restored alert states had evaluated is left out (pure)."""

from __future__ import annotations

import math

from alertd.model import Sample, SeriesKey
from alertd.rules.carry import seen_before, unseen
from alertd.rules.state import Track

LOSS = SeriesKey("loss", (("run", "a"),))
OTHER = SeriesKey("loss", (("run", "b"),))


def _track(time: float, step: int | None) -> Track:
    tr = Track()
    tr.time, tr.last_time, tr.step, tr.value = time, time, step, 1.0
    return tr


def test_the_last_sample_each_series_tracks_saw_is_its_mark() -> None:
    fresh = Track()  # a track that saw no sample marks nothing
    tracks = {("nan", LOSS): _track(10.0, 5), ("high", LOSS): _track(12.0, 6), ("nan", OTHER): fresh}
    assert seen_before(tracks) == {LOSS: (12.0, 6)}


def test_samples_read_again_are_left_out_and_the_first_newer_one_ends_the_check() -> None:
    seen = {LOSS: (12.0, 6)}
    again = [Sample(LOSS, 10.0 + i * 0.5, 2 + i, 1.0) for i in range(5)]  # steps 2..6, times 10..12
    new = [Sample(LOSS, 12.5, 7, math.nan), Sample(OTHER, 1.0, 1, 1.0)]
    assert unseen([*again, *new], seen) == new
    assert seen == {}
    late = Sample(LOSS, 11.0, 3, 1.0)  # from here on the series' samples are new, whatever their order
    assert unseen([late], seen) == [late]


def test_a_newer_step_at_the_same_time_and_a_checkpoint_restart_are_new() -> None:
    same_time = Sample(LOSS, 12.0, 7, math.nan)
    assert unseen([Sample(LOSS, 12.0, 6, 1.0), same_time], {LOSS: (12.0, 6)}) == [same_time]
    resumed = Sample(LOSS, 20.0, 3, 1.0)  # the trainer resumed from an earlier checkpoint, later on
    assert unseen([resumed], {LOSS: (12.0, 6)}) == [resumed]
    no_step = Sample(LOSS, 12.0, None, 1.0)
    assert unseen([no_step], {LOSS: (12.0, None)}) == []
