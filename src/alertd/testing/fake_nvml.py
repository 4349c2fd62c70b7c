"""A fake NVML: the `pynvml` functions alertd calls, over an in-memory table of GPUs.

It raises the real `pynvml.NVMLError_*` classes, refuses any name the installed nvidia-ml-py does not
have, and counts every call (`calls`), so tests can drive scenarios (a GPU lost, a metric not
supported, the library missing at init) and check that the source stops asking what it was told once.
Values are what a test sets on the `FakeGpu` objects between polls; units are NVML's (mW, bytes, MHz).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import pynvml

F = TypeVar("F", bound=Callable[..., Any])

NOT_MIG = 0xFFFFFFFF
"""`gpuInstanceId` / `computeInstanceId` of a process that is not on a MIG device."""


@dataclass
class FakeProcess:
    """A process using a GPU; `used_memory` None is NVML's "not available"."""

    pid: int
    used_memory: int | None
    graphics: bool = False


@dataclass
class FakeGpu:
    """One GPU (or MIG device, in `mig_devices`). Change the fields between polls to script a scenario.

    `unsupported` holds pynvml function names that raise NotSupported on this device; `errors` maps a
    function name to an exception (class or instance) raised on every call until removed.
    """

    uuid: str
    name: str = "NVIDIA H200"
    utilization: int = 0
    memory_utilization: int = 0
    memory_used: int = 0
    memory_total: int = 141 * 2**30
    temperature: int = 35
    slowdown_temperature: int = 90
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    fan_speed: int = 30
    sm_clock: int = 1980
    clock_event_reasons: int = 0
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    retired_pages: tuple[int, int] = (0, 0)
    retired_pending: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    mig_enabled: bool = False
    mig_devices: list[FakeGpu | None] = field(default_factory=list)
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    errors: dict[str, Any] = field(default_factory=dict)


class FakeHandle:
    """The opaque handle the fake hands out (the real one is a ctypes pointer)."""

    __slots__ = ("gpu", "parent")

    def __init__(self, gpu: FakeGpu, parent: FakeGpu | None = None) -> None:
        self.gpu = gpu
        self.parent = parent


def _nvml_call(fn: F) -> F:
    """Count the call and apply the device's scripted state (lost, unsupported, errors)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: FakeNvml, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        if name != "nvmlInit" and not self.initialized:
            raise pynvml.NVMLError_Uninitialized()
        if name in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()
        handle = args[0] if args and isinstance(args[0], FakeHandle) else None
        if handle is not None:
            self._check_handle(handle, name)
        return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class FakeNvml:
    """Stands in for the `pynvml` module. Pass it as `NvmlSource(cfg, nvml=fake)`.

    `installed=False` makes `nvmlInit` raise LibraryNotFound (call `install()` later), `driver_loaded=False`
    DriverNotLoaded. `missing` names functions the "driver" lacks (they raise FunctionNotFound);
    `memory_v2=False` is a driver older than 510, whose `nvmlDeviceGetMemoryInfo(version=...)` fails so.
    """

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        installed: bool = True,
        driver_loaded: bool = True,
        missing: set[str] | None = None,
        memory_v2: bool = True,
    ) -> None:
        self.gpus: list[FakeGpu] = list(gpus or [])
        self.installed = installed
        self.driver_loaded = driver_loaded
        self.missing: set[str] = set(missing or ())
        self.memory_v2 = memory_v2
        self.initialized = False
        self.calls: collections.Counter[str] = collections.Counter()
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if not hasattr(pynvml, name):
            self.refused.append(name)
            raise AttributeError(f"{name!r} is not in the installed pynvml (nvidia-ml-py)")
        value = getattr(pynvml, name)
        if callable(value) and name.startswith("nvml"):
            self.refused.append(name)
            raise AttributeError(f"the fake NVML does not implement pynvml.{name}")
        return value  # constants and error classes are the real ones

    def install(self) -> None:
        """The driver appears: the next nvmlInit succeeds."""
        self.installed = True
        self.driver_loaded = True

    @staticmethod
    def gpu_call_names() -> list[str]:
        """The pynvml function names this fake implements."""
        return sorted(n for n, v in vars(FakeNvml).items() if n.startswith("nvml") and callable(v))

    def _check_handle(self, handle: FakeHandle, name: str) -> None:
        gpu = handle.parent or handle.gpu
        if gpu.lost or handle.gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if gpu not in self.gpus:
            raise pynvml.NVMLError_Unknown()
        if name in handle.gpu.unsupported:
            raise pynvml.NVMLError_NotSupported()
        err = handle.gpu.errors.get(name)
        if err is not None:
            raise err() if isinstance(err, type) else err

    # --- lifecycle -------------------------------------------------------------------------------
    @_nvml_call
    def nvmlInit(self) -> None:
        if not self.installed:
            raise pynvml.NVMLError_LibraryNotFound()
        if not self.driver_loaded:
            raise pynvml.NVMLError_DriverNotLoaded()
        self.initialized = True

    @_nvml_call
    def nvmlShutdown(self) -> None:
        self.initialized = False

    # --- enumeration ------------------------------------------------------------------------------
    @_nvml_call
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    @_nvml_call
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return FakeHandle(gpu)

    @_nvml_call
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeHandle:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return FakeHandle(gpu)
        raise pynvml.NVMLError_NotFound()

    @_nvml_call
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return handle.gpu.uuid

    @_nvml_call
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return handle.gpu.name

    # --- readings ---------------------------------------------------------------------------------
    @_nvml_call
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.gpu.utilization, memory=handle.gpu.memory_utilization)

    @_nvml_call
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> SimpleNamespace:
        if version and not self.memory_v2:
            raise pynvml.NVMLError_FunctionNotFound()
        g = handle.gpu
        mem = SimpleNamespace(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)
        if version:
            mem.version, mem.reserved = version, 0
        return mem

    @_nvml_call
    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int, version: int = 0) -> int:
        return handle.gpu.temperature

    @_nvml_call
    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        return handle.gpu.temperature

    @_nvml_call
    def nvmlDeviceGetTemperatureThreshold(self, handle: FakeHandle, threshold: int) -> int:
        if threshold != pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            raise pynvml.NVMLError_NotSupported()
        return handle.gpu.slowdown_temperature

    @_nvml_call
    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return handle.gpu.power_mw

    @_nvml_call
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return handle.gpu.power_limit_mw

    @_nvml_call
    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        return handle.gpu.fan_speed

    @_nvml_call
    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        return handle.gpu.sm_clock

    @_nvml_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return handle.gpu.clock_event_reasons

    @_nvml_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return handle.gpu.clock_event_reasons

    @_nvml_call
    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        return handle.gpu.ecc_uncorrected

    @_nvml_call
    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        return handle.gpu.remapped_rows

    @_nvml_call
    def nvmlDeviceGetRetiredPages(self, handle: FakeHandle, cause: int) -> list[int]:
        return [0x1000 * (i + 1) for i in range(handle.gpu.retired_pages[cause])]

    @_nvml_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        return handle.gpu.retired_pending

    @_nvml_call
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        return self._processes(handle, graphics=False)

    @_nvml_call
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        return self._processes(handle, graphics=True)

    def _processes(self, handle: FakeHandle, *, graphics: bool) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_memory, gpuInstanceId=NOT_MIG, computeInstanceId=NOT_MIG)
            for p in handle.gpu.processes
            if p.graphics == graphics
        ]

    # --- MIG --------------------------------------------------------------------------------------
    @_nvml_call
    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        mode = int(handle.gpu.mig_enabled)
        return [mode, mode]

    @_nvml_call
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        return 7 if handle.gpu.mig_enabled else 0

    @_nvml_call
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        devices = handle.gpu.mig_devices
        if not handle.gpu.mig_enabled or index >= len(devices) or devices[index] is None:
            raise pynvml.NVMLError_NotFound()
        mig = devices[index]
        assert mig is not None
        return FakeHandle(mig, parent=handle.gpu)


def _check_names() -> None:
    """The fake implements only names the real binding has (checked at import)."""
    unknown = [n for n in FakeNvml.gpu_call_names() if not hasattr(pynvml, n)]
    if unknown:
        raise ImportError(f"fake NVML implements functions pynvml does not have: {unknown}")


_check_names()


def make_gpus(count: int, *, name: str = "NVIDIA H200") -> list[FakeGpu]:
    """`count` healthy idle GPUs with distinct UUIDs."""
    return [FakeGpu(uuid=f"GPU-{i:08x}-0000-0000-0000-{i:012x}", name=name) for i in range(count)]
