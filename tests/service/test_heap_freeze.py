"""The start-up objects are frozen out of the collector's passes once the start-up read is over, and again only
when the buffer doubled and held still."""

from __future__ import annotations

import gc

from alertd.service.heap import GROWTH, HeapFreezer


def test_frozen_once_the_start_up_read_is_over_and_again_when_the_series_double() -> None:
    heap = HeapFreezer()
    try:
        assert not heap.started(False, 100) and not heap.housekeeping(100)  # still reading: nothing frozen
        before = gc.get_freeze_count()
        keep = [[i] for i in range(1000)]  # long-lived objects, tracked by the collector
        assert heap.started(True, 3000) and heap.frozen_at == 3000
        assert gc.get_freeze_count() >= before + len(keep)
        assert not heap.started(True, 3000)  # once
        grown = max(6000, 3000 + GROWTH)
        assert [heap.housekeeping(n) for n in (3000, 5000, 5000, grown - 1, grown - 1, grown)] == [False] * 6
        assert heap.housekeeping(grown) and heap.frozen_at == grown  # doubled and held still
    finally:
        gc.unfreeze()
