"""The NVML source driven through scenarios on a fake clock: idle GPUs, heat, loss, missing library."""

from __future__ import annotations

import logging

import pynvml
import pytest
from nvml_helpers import make_source, metrics, value

from alertd.model import Sample
from alertd.testing import FakeNvml, FakeProcess, make_gpus

pytestmark = pytest.mark.anyio
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def series(samples: list[Sample], metric: str, gpu: str = "0") -> list[tuple[float, float]]:
    """(time, value) of one series, in order."""
    return [(s.time, s.value) for s in samples if s.series.metric == metric and s.series.label("gpu") == gpu]


async def test_utilisation_low_for_thirty_minutes() -> None:
    gpus = make_gpus(2)
    gpus[0].processes = [FakeProcess(pid=31337, used_memory=60 * 2**30)]
    src = make_source(FakeNvml(gpus))
    seen: list[Sample] = []
    for i in range(0, 1801, 2):  # one poll every 2 s for 30 minutes
        gpus[0].utilization = 96 if i < 60 else 3  # the trainer stalls after one minute
        gpus[1].utilization = 90
        seen += await src.poll(T0 + i)

    util = series(seen, "gpu.utilization")
    assert len(util) == 901
    assert [t for t, _ in util] == [T0 + i for i in range(0, 1801, 2)]
    assert all(v == 96 for t, v in util if t < T0 + 60)
    assert all(v == 3 for t, v in util if t >= T0 + 60)
    assert all(v == 90 for _, v in series(seen, "gpu.utilization", "1"))
    pid = [s for s in seen if s.series.metric == "gpu.process.memory.used" and s.time == T0 + 1800]
    assert [(s.series.label("pid"), s.series.label("gpu"), s.value) for s in pid] == [("31337", "0", 60 * 2**30)]


async def test_temperature_rising_into_thermal_slowdown() -> None:
    gpus = make_gpus(1)
    src = make_source(FakeNvml(gpus))
    seen: list[Sample] = []
    for i in range(40):
        gpus[0].temperature = 60 + i
        if gpus[0].temperature >= gpus[0].slowdown_temperature:
            gpus[0].clock_event_reasons = 0x20 | 0x08 | 0x40  # sw + hw thermal, hw slowdown
        seen += await src.poll(T0 + i)

    temps = [v for _, v in series(seen, "gpu.temperature")]
    assert temps == [60.0 + i for i in range(40)]
    assert {v for _, v in series(seen, "gpu.temperature.slowdown")} == {90.0}
    thermal = series(seen, "gpu.throttle.thermal")
    first_on = next(t for t, v in thermal if v == 1.0)
    assert first_on == T0 + 30  # 90 °C reached at the 31st poll
    assert all(v == 1.0 for t, v in thermal if t >= first_on)
    assert all(v == 0.0 for _, v in series(seen, "gpu.throttle.power_cap"))


async def test_gpu_lost_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    gpus = make_gpus(2)
    fake = FakeNvml(gpus)
    src = make_source(fake)
    seen: list[Sample] = []
    with caplog.at_level(logging.ERROR, logger="alertd.sources.nvml"):
        for i in range(10):
            if i == 4:
                gpus[1].lost = True  # Xid 79: fell off the bus
            seen += await src.poll(T0 + i)
            if i == 4:
                calls_after_loss = sum(fake.calls.values())

    assert series(seen, "gpu.lost", "1") == [(T0 + i, 0.0 if i < 4 else 1.0) for i in range(10)]
    assert series(seen, "gpu.lost", "0") == [(T0 + i, 0.0) for i in range(10)]
    assert len(series(seen, "gpu.utilization", "0")) == 10
    assert [t for t, _ in series(seen, "gpu.utilization", "1")] == [T0 + i for i in range(4)]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "GPU 1" in errors[0].getMessage() and "lost" in errors[0].getMessage()
    per_poll_gpu0 = (sum(fake.calls.values()) - calls_after_loss) / 5
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 10 + 5  # GPU 1: asked until it was lost, then never
    assert per_poll_gpu0 < 25


async def test_gpu_that_vanishes_from_the_device_list_is_reported_lost() -> None:
    gpus = make_gpus(3)
    fake = FakeNvml(gpus)
    src = make_source(fake)
    await src.poll(T0)
    del fake.gpus[1]
    samples = await src.poll(T0 + 1)
    assert value(samples, "gpu.lost", "1") == 1
    assert value(samples, "gpu.lost", "0") == 0 and value(samples, "gpu.lost", "2") == 0
    assert metrics(samples, "1") == {"gpu.lost"}


async def test_gpu_lost_at_startup_is_reported_without_uuid() -> None:
    gpus = make_gpus(2)
    gpus[0].lost = True
    samples = await make_source(FakeNvml(gpus)).poll(T0)
    assert value(samples, "gpu.lost", "0") == 1
    assert value(samples, "gpu.lost", "1") == 0


async def test_unsupported_metrics_are_dropped_once_and_never_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = make_gpus(2)
    gpus[0].unsupported = {
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetTotalEccErrors",
    }
    gpus[0].errors = {"nvmlDeviceGetRemappedRows": pynvml.NVMLError_NoPermission}
    fake = FakeNvml(gpus)
    src = make_source(fake)
    with caplog.at_level(logging.DEBUG, logger="alertd.sources.nvml"):
        for i in range(10):
            samples = await src.poll(T0 + i)

    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1 + 10  # GPU 0 once, GPU 1 every poll
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 1 + 10 * 2  # GPU 1 asks for both causes
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 1 + 10
    gone = {"gpu.fan.speed", "gpu.retired_pages", "gpu.ecc.uncorrected", "gpu.remapped_rows.pending"}
    assert not gone & metrics(samples, "0")
    assert gone <= metrics(samples, "1")
    assert src.dropped["0"] == {"fan.speed", "retired_pages", "ecc.uncorrected", "remapped_rows"}
    assert src.dropped["1"] == set()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "GPU" in r.getMessage()]
    assert len([r for r in caplog.records if "not supported" in r.getMessage()]) == 4


async def test_older_driver_falls_back_to_older_calls_for_good() -> None:
    missing = {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"}
    gpus = make_gpus(1)
    gpus[0].clock_event_reasons = 0x40
    gpus[0].temperature = 93
    fake = FakeNvml(gpus, missing=missing, memory_v2=False)
    src = make_source(fake)
    for i in range(5):
        samples = await src.poll(T0 + i)
    assert value(samples, "gpu.throttle.hw_thermal") == 1
    assert value(samples, "gpu.temperature") == 93
    assert value(samples, "gpu.memory.total") == gpus[0].memory_total
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 5
    assert fake.calls["nvmlDeviceGetTemperatureV"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 5
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1 + 5  # v2 once, then v1 every poll


async def test_other_errors_skip_the_metric_this_poll_and_log_once(caplog: pytest.LogCaptureFixture) -> None:
    gpus = make_gpus(1)
    gpus[0].power_mw = 300_000
    gpus[0].errors = {"nvmlDeviceGetPowerUsage": pynvml.NVMLError_Unknown}
    fake = FakeNvml(gpus)
    src = make_source(fake)
    with caplog.at_level(logging.WARNING, logger="alertd.sources.nvml"):
        for i in range(3):
            samples = await src.poll(T0 + i)
            assert "gpu.power" not in metrics(samples)
            assert "gpu.temperature" in metrics(samples)
        del gpus[0].errors["nvmlDeviceGetPowerUsage"]
        samples = await src.poll(T0 + 3)

    assert value(samples, "gpu.power") == 300
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 4
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "power" in warnings[0] and "Unknown Error" in warnings[0]


@pytest.mark.parametrize(
    ("fake_kwargs", "hint"),
    [
        ({"installed": False}, "libnvidia-ml.so.1 not found"),
        ({"driver_loaded": False}, "driver is not loaded"),
    ],
)
async def test_missing_library_disables_with_one_warning_and_retries_rarely(
    caplog: pytest.LogCaptureFixture, fake_kwargs: dict[str, bool], hint: str
) -> None:
    fake = FakeNvml(make_gpus(2), **fake_kwargs)
    src = make_source(fake, retry_init="5m")
    with caplog.at_level(logging.DEBUG, logger="alertd.sources.nvml"):
        for i in range(0, 600, 2):  # ten minutes of polls every 2 s
            assert await src.poll(T0 + i) == []
            if i == 400:
                fake.install()
        assert not src.enabled
        assert fake.calls["nvmlInit"] == 2  # at T0 and T0 + 300, not at every poll
        samples = await src.poll(T0 + 600)

    assert src.enabled and fake.calls["nvmlInit"] == 3
    assert {s.series.label("gpu") for s in samples} == {"0", "1"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the one "disabled" message, then "NVML ready" once it works
    assert hint in warnings[0] and "retried every 5m" in warnings[0] and "'gpus'" in warnings[0]
    assert "ready" in warnings[1]


async def test_aclose_shuts_nvml_down_once_and_stops_polling() -> None:
    fake = FakeNvml(make_gpus(1))
    src = make_source(fake)
    assert await src.poll(T0)
    await src.aclose()
    assert fake.calls["nvmlShutdown"] == 1 and not fake.initialized
    calls = sum(fake.calls.values())
    assert await src.poll(T0 + 1) == []
    await src.aclose()
    assert sum(fake.calls.values()) == calls


async def test_aclose_before_nvml_ever_worked_calls_no_shutdown() -> None:
    fake = FakeNvml(make_gpus(1), installed=False)
    src = make_source(fake)
    assert await src.poll(T0) == []
    await src.aclose()
    assert fake.calls["nvmlShutdown"] == 0
