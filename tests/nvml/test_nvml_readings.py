"""What the NVML source reports from healthy GPUs: names, units, labels, processes, MIG."""

from __future__ import annotations

import socket

import pytest
from nvml_helpers import make_source, metrics, value

import alertd.sources.nvml as nvml_module
from alertd.testing import FakeGpu, FakeNvml, FakeProcess, make_gpus

pytestmark = pytest.mark.anyio
GiB = 2**30


async def test_every_metric_with_units_and_labels() -> None:
    gpus = make_gpus(2)
    g = gpus[1]
    g.utilization, g.memory_utilization = 97, 41
    g.memory_used, g.memory_total = 80 * GiB, 141 * GiB
    g.temperature, g.slowdown_temperature = 71, 90
    g.power_mw, g.power_limit_mw = 612_500, 700_000
    g.fan_speed, g.sm_clock = 55, 1755
    g.clock_event_reasons = 0x04  # SwPowerCap
    g.ecc_uncorrected, g.remapped_rows, g.retired_pages, g.retired_pending = 2, (5, 1, 1, 0), (3, 1), 1
    src = make_source(FakeNvml(gpus))

    samples = await src.poll(1_700_000_000.5)

    assert value(samples, "gpu.utilization", "1") == 97
    assert value(samples, "gpu.memory.utilization", "1") == 41
    assert value(samples, "gpu.memory.used", "1") == 80 * GiB
    assert value(samples, "gpu.memory.total", "1") == 141 * GiB
    assert value(samples, "gpu.temperature", "1") == 71
    assert value(samples, "gpu.temperature.slowdown", "1") == 90
    assert value(samples, "gpu.power", "1") == pytest.approx(612.5)
    assert value(samples, "gpu.power.limit", "1") == pytest.approx(700.0)
    assert value(samples, "gpu.fan.speed", "1") == 55
    assert value(samples, "gpu.clock.sm", "1") == 1755
    assert value(samples, "gpu.throttle.power_cap", "1") == 1
    assert value(samples, "gpu.throttle.thermal", "1") == 0
    assert value(samples, "gpu.ecc.uncorrected", "1") == 2
    assert value(samples, "gpu.remapped_rows.uncorrectable", "1") == 1
    assert value(samples, "gpu.remapped_rows.pending", "1") == 1
    assert value(samples, "gpu.remapped_rows.failed", "1") == 0
    assert value(samples, "gpu.retired_pages", "1") == 4
    assert value(samples, "gpu.retired_pages.pending", "1") == 1
    assert value(samples, "gpu.processes", "1") == 0
    assert value(samples, "gpu.lost", "1") == 0
    assert all(s.time == 1_700_000_000.5 and s.step is None for s in samples)
    one = next(s for s in samples if s.series.metric == "gpu.power" and s.series.label("gpu") == "1")
    assert one.series.label_dict() == {
        "source": "gpus",
        "gpu": "1",
        "gpu_uuid": g.uuid,
        "gpu_name": "NVIDIA H200",
        "host": socket.gethostname(),
    }
    assert metrics(samples, "0") == metrics(samples, "1")


async def test_every_emitted_metric_is_documented_in_the_module_docstring() -> None:
    gpus = make_gpus(1)
    gpus[0].processes = [FakeProcess(pid=42, used_memory=GiB)]
    samples = await make_source(FakeNvml(gpus)).poll(0.0)
    doc = nvml_module.__doc__ or ""
    names = {s.series.metric for s in samples}
    throttles = {n for n in names if n.startswith("gpu.throttle.")}
    assert {f"gpu.throttle.{r}" for r, _ in nvml_module.THROTTLE_REASONS} == throttles
    for name in names - throttles:
        assert f"\n{name} " in doc, name
    for reason, _bits in nvml_module.THROTTLE_REASONS:
        assert reason in doc


@pytest.mark.parametrize(
    ("bits", "active"),
    [
        (0x00, set()),
        (0x01, {"idle"}),
        (0x20, {"thermal"}),
        (0x40, {"thermal", "hw_thermal"}),
        (0x08 | 0x80, {"hw_slowdown", "hw_power_brake"}),
        (0x02 | 0x10 | 0x100, {"applications_clocks", "sync_boost", "display_clocks"}),
        (0x200 | 0x400, {"board_limit", "reliability"}),
    ],
)
async def test_clock_event_reason_bits_map_to_throttle_series(bits: int, active: set[str]) -> None:
    gpus = make_gpus(1)
    gpus[0].clock_event_reasons = bits
    samples = await make_source(FakeNvml(gpus)).poll(0.0)
    on = {s.series.metric.removeprefix("gpu.throttle.") for s in samples if s.value == 1.0}
    on.discard("gpu.lost")
    assert on == active


async def test_processes_memory_per_pid_compute_and_graphics() -> None:
    gpus = make_gpus(2)
    gpus[0].processes = [
        FakeProcess(pid=4242, used_memory=70 * GiB),
        FakeProcess(pid=4242, used_memory=None, graphics=True),
        FakeProcess(pid=77, used_memory=GiB // 2, graphics=True),
        FakeProcess(pid=88, used_memory=None),
    ]
    samples = await make_source(FakeNvml(gpus)).poll(5.0)

    assert value(samples, "gpu.process.memory.used", "0", pid="4242") == 70 * GiB
    assert value(samples, "gpu.process.memory.used", "0", pid="77") == GiB // 2
    assert not [s for s in samples if s.series.label("pid") == "88"]  # memory not available: no value
    assert value(samples, "gpu.processes", "0") == 3
    assert value(samples, "gpu.processes", "1") == 0
    assert not [s for s in samples if s.series.label("gpu") == "1" and s.series.label("pid")]


async def test_processes_off_by_config() -> None:
    gpus = make_gpus(1)
    gpus[0].processes = [FakeProcess(pid=1, used_memory=GiB)]
    fake = FakeNvml(gpus)
    samples = await make_source(fake, processes=False).poll(0.0)
    assert "gpu.processes" not in metrics(samples)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 0


async def test_devices_limits_the_gpus_read() -> None:
    fake = FakeNvml(make_gpus(4))
    samples = await make_source(fake, devices=[1, 3, 9]).poll(0.0)
    assert {s.series.label("gpu") for s in samples} == {"1", "3"}


async def test_mig_devices_report_memory_and_processes_with_parent_label() -> None:
    gpus = make_gpus(2)
    parent = gpus[0]
    parent.mig_enabled = True
    parent.unsupported = {"nvmlDeviceGetUtilizationRates"}  # as on a real GPU in MIG mode
    mig0 = FakeGpu(uuid="MIG-aaaa", name="NVIDIA H200 MIG 3g.71gb", memory_used=10 * GiB, memory_total=71 * GiB)
    mig2 = FakeGpu(uuid="MIG-cccc", name="NVIDIA H200 MIG 1g.18gb", memory_used=GiB, memory_total=18 * GiB)
    mig2.processes = [FakeProcess(pid=555, used_memory=GiB)]
    parent.mig_devices = [mig0, None, mig2]
    gpus[1].unsupported = {"nvmlDeviceGetMigMode"}
    fake = FakeNvml(gpus)
    src = make_source(fake)

    for t in range(3):
        samples = await src.poll(float(t))

    assert value(samples, "gpu.memory.used", "0/0", parent_gpu="0", gpu_uuid="MIG-aaaa") == 10 * GiB
    assert value(samples, "gpu.memory.total", "0/2", parent_gpu="0", gpu_uuid="MIG-cccc") == 18 * GiB
    assert value(samples, "gpu.process.memory.used", "0/2", pid="555") == GiB
    assert metrics(samples, "0/0") == {"gpu.memory.used", "gpu.memory.total", "gpu.processes"}
    assert "gpu.utilization" not in metrics(samples, "0")
    assert "gpu.temperature" in metrics(samples, "0")
    assert "gpu.utilization" in metrics(samples, "1")
    assert fake.calls["nvmlDeviceGetMigMode"] == 3 + 1  # GPU 1 said NotSupported once: never asked again
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 1 + 3

    parent.mig_enabled = False
    samples = await src.poll(10.0)
    assert not [s for s in samples if s.series.label("parent_gpu")]
