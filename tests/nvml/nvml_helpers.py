"""Helpers for the NVML source tests: build a source over the fake NVML and read its samples."""

from __future__ import annotations

from typing import Any

from alertd.model import Sample
from alertd.sources.config import NvmlConfig
from alertd.sources.nvml import NvmlSource
from alertd.testing import FakeNvml


def make_source(fake: FakeNvml, **cfg: Any) -> NvmlSource:
    """An NvmlSource named `gpus` over `fake`."""
    return NvmlSource(NvmlConfig(type="nvml", name="gpus", **cfg), nvml=fake)


def value(samples: list[Sample], metric: str, gpu: str = "0", **labels: str) -> float:
    """The one value of `metric` on `gpu` (and `labels`) in `samples`; fails if not exactly one."""
    found = [
        s.value
        for s in samples
        if s.series.metric == metric
        and s.series.label("gpu") == gpu
        and all(s.series.label(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, f"{metric} on gpu {gpu} {labels}: {found}"
    return found[0]


def metrics(samples: list[Sample], gpu: str = "0") -> set[str]:
    """The metric names present for `gpu`."""
    return {s.series.metric for s in samples if s.series.label("gpu") == gpu}
