"""The source and the fake call only functions the installed nvidia-ml-py really has."""

from __future__ import annotations

import ast
import inspect
import logging

import pynvml
import pytest
from nvml_helpers import make_source

import alertd.sources.nvml as nvml_module
from alertd.sources.config import NvmlConfig
from alertd.sources.nvml import NVML_FUNCTIONS, NvmlSource
from alertd.testing import FakeGpu, FakeNvml, FakeProcess, make_gpus

pytestmark = pytest.mark.anyio


def _names_in_source() -> set[str]:
    """Every `x.nvml...` attribute and every "nvml..." string literal in the source module."""
    tree = ast.parse(inspect.getsource(nvml_module))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("nvml"):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.update([node.value] if node.value.startswith("nvml") else [])
    return names


def test_every_function_the_source_names_exists_in_pynvml() -> None:
    named = _names_in_source()
    assert "nvmlDeviceGetCurrentClocksEventReasons" in named  # the scan sees the call tables
    constants = {n for n in named if not callable(getattr(pynvml, n, None))}
    assert constants <= {"nvmlMemory_v2"}, constants
    missing = sorted(n for n in named | NVML_FUNCTIONS if not hasattr(pynvml, n))
    assert missing == []
    assert named - constants <= NVML_FUNCTIONS  # the declared list is complete
    for err in ("NotSupported", "GpuIsLost", "LibraryNotFound", "DriverNotLoaded", "FunctionNotFound"):
        assert issubclass(getattr(pynvml, f"NVMLError_{err}"), pynvml.NVMLError)


async def test_a_full_scenario_calls_only_real_pynvml_names() -> None:
    gpus = make_gpus(2)
    gpus[0].processes = [FakeProcess(pid=7, used_memory=1), FakeProcess(pid=8, used_memory=2, graphics=True)]
    gpus[1].mig_enabled = True
    gpus[1].mig_devices = [FakeGpu(uuid="MIG-1")]
    fake = FakeNvml(gpus, missing={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons"})
    src = make_source(fake)
    await src.poll(0.0)
    del fake.gpus[0]
    await src.poll(1.0)
    await src.aclose()
    assert fake.refused == []
    assert set(fake.calls) <= NVML_FUNCTIONS
    assert NVML_FUNCTIONS - set(fake.calls) == set()  # every declared function was exercised


def test_the_fake_refuses_names_that_pynvml_lacks_or_it_does_not_implement() -> None:
    fake = FakeNvml()
    with pytest.raises(AttributeError, match="not in the installed pynvml"):
        _ = fake.nvmlDeviceGetTemperatureOfTheSun
    with pytest.raises(AttributeError, match="does not implement"):
        _ = fake.nvmlDeviceGetPcieThroughput
    assert fake.refused == ["nvmlDeviceGetTemperatureOfTheSun", "nvmlDeviceGetPcieThroughput"]
    assert fake.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert all(hasattr(pynvml, n) for n in FakeNvml.gpu_call_names())


def test_the_fake_raises_the_real_error_classes() -> None:
    fake = FakeNvml(make_gpus(1), installed=False)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        fake.nvmlInit()
    fake.install()
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.gpus[0].lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(h)


async def test_real_pynvml_on_this_machine(caplog: pytest.LogCaptureFixture) -> None:
    """Against the real library: disabled with one warning where there is no driver, else real samples."""
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded):
        has_gpu = False
    else:
        has_gpu = pynvml.nvmlDeviceGetCount() > 0
        pynvml.nvmlShutdown()
    src = NvmlSource(NvmlConfig(type="nvml", name="local"))
    with caplog.at_level(logging.WARNING, logger="alertd.sources.nvml"):
        first = await src.poll(0.0)
        second = await src.poll(1.0)
    await src.aclose()
    if has_gpu:
        assert {s.series.metric for s in first} >= {"gpu.memory.total", "gpu.lost"}
        assert second
    else:
        assert first == [] and second == []
        assert len(caplog.records) == 1
        assert "disabled" in caplog.records[0].getMessage()
