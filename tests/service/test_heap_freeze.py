"""The start-up objects are frozen out of the collector's passes once the start-up read is over, and again only
when the buffer doubled."""

from __future__ import annotations

import gc

from alertd.service.heap import HeapFreezer


def test_frozen_once_the_series_settle_and_again_when_they_double() -> None:
    heap = HeapFreezer()
    try:
        assert [heap.housekeeping(n) for n in (100, 5000, 9000)] == [False, False, False]  # still reading
        before = gc.get_freeze_count()
        keep = [[i] for i in range(1000)]  # long-lived objects, tracked by the collector
        assert heap.housekeeping(9000) and heap.frozen_at == 9000  # the series settled: frozen
        assert gc.get_freeze_count() >= before + len(keep)
        assert [heap.housekeeping(n) for n in (9000, 12000, 12000, 17999, 17999)] == [False] * 5
        assert not heap.housekeeping(18000)  # doubled, but still moving
        assert heap.housekeeping(18000) and heap.frozen_at == 18000
    finally:
        gc.unfreeze()
