"""A disabled NVML source (no library, no driver) as a person and Prometheus see it: a real Service with its API
on 127.0.0.1, the NVML module replaced by the fake one (which raises pynvml's own LibraryNotFound), then the
driver "installed" and the source reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_helpers import serving, wait_for
from prometheus_client.parser import text_string_to_metric_families

import alertd.sources.nvml
from alertd.service import Service
from alertd.testing import FakeNvml, make_gpus

pytestmark = pytest.mark.anyio

RULES = """\
sources:
  - {name: gpu, type: nvml, interval: 0.1s, retry_init: 0.2s}
rules:
  - {name: gpu_hot, metric: gpu.temperature, condition: "> 83"}
"""


def source_gauges(text: str) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("alertd_source_up", "alertd_source_disabled") and s.labels == {"source": "gpu"}
    }


async def test_a_disabled_nvml_source_is_down_and_disabled_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeNvml(make_gpus(1), installed=False)
    monkeypatch.setattr(alertd.sources.nvml, "pynvml", fake)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    service = Service([str(rules)], state=tmp_path / "state")
    async with serving(service) as client:
        await wait_for(lambda: service.health["gpu"].last_poll is not None, what="the first poll")
        (gpu,) = (await client.get("/api/v1/sources")).json()
        assert (gpu["up"], gpu["state"]) == (False, "disabled")
        assert gpu["note"].startswith("libnvidia-ml.so.1 not found (no NVIDIA driver")
        assert gpu["note"].endswith("; nvmlInit is retried every 200ms")
        assert source_gauges((await client.get("/metrics")).text) == {
            "alertd_source_up": 0.0,
            "alertd_source_disabled": 1.0,
        }
        fake.install()  # the driver appears: the next nvmlInit works and the source reads
        await wait_for(lambda: service.engine.buffer.series_by_source().get("gpu", 0) > 1, what="GPU samples")
        (gpu,) = (await client.get("/api/v1/sources")).json()
        assert (gpu["up"], gpu["state"], gpu["note"]) == (True, "up", None)
        assert source_gauges((await client.get("/metrics")).text) == {
            "alertd_source_up": 1.0,
            "alertd_source_disabled": 0.0,
        }
