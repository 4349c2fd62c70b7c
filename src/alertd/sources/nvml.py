"""The `nvml` source: the local NVIDIA GPUs, read through NVML (`pynvml` from nvidia-ml-py).

Every sample has `step` None, `time` the poll's `now`, and labels `source`, `gpu` (the NVML index),
`gpu_uuid`, `gpu_name` and `host`. A MIG device has `gpu` = "<parent index>/<MIG index>" and
`parent_gpu` = the parent's index; it reports memory and processes only.

metric                           unit     meaning
gpu.utilization                  percent  time a kernel was running (not SM occupancy)
gpu.memory.utilization           percent  time device memory was read or written
gpu.memory.used                  bytes    device memory in use
gpu.memory.total                 bytes    device memory
gpu.temperature                  °C       GPU core temperature
gpu.temperature.slowdown         °C       temperature at which the GPU slows itself down
gpu.power                        W        power draw
gpu.power.limit                  W        enforced power limit
gpu.fan.speed                    percent  fan speed (absent on passively cooled boards)
gpu.clock.sm                     MHz      current SM clock
gpu.throttle.<reason>            0 or 1   a clock-event (throttle) reason is active; reasons: thermal (sw or
                                          hw thermal slowdown), hw_thermal, power_cap, hw_slowdown,
                                          hw_power_brake, sync_boost, idle, applications_clocks,
                                          display_clocks, board_limit, reliability
gpu.ecc.uncorrected              count    uncorrected ECC errors since the driver loaded (volatile)
gpu.remapped_rows.uncorrectable  count    rows remapped for uncorrectable errors (Ampere and later)
gpu.remapped_rows.pending        0 or 1   a row remap waits for a GPU reset
gpu.remapped_rows.failed         0 or 1   a row remap failed
gpu.retired_pages                count    retired pages, both causes (before Ampere)
gpu.retired_pages.pending        0 or 1   a page retirement waits for a reboot
gpu.processes                    count    processes using the GPU (compute and graphics)
gpu.process.memory.used          bytes    a process's GPU memory, label `pid` (host pid namespace)
gpu.lost                         0 or 1   1 once the GPU fell off the bus (GpuIsLost) or vanished

A metric the GPU does not support is dropped for that GPU the first time NVML says so and never asked
again. No library or no driver at start: the source logs one warning, returns nothing, and retries
`nvmlInit` every `retry_init` seconds. All NVML calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pynvml

from alertd.durations import format_duration
from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import NvmlConfig

log = logging.getLogger(__name__)

THROTTLE_REASONS: tuple[tuple[str, int], ...] = (
    ("thermal", 0x20 | 0x40),
    ("hw_thermal", 0x40),
    ("power_cap", 0x04),
    ("hw_slowdown", 0x08),
    ("hw_power_brake", 0x80),
    ("sync_boost", 0x10),
    ("idle", 0x01),
    ("applications_clocks", 0x02),
    ("display_clocks", 0x100),
    ("board_limit", 0x200),
    ("reliability", 0x400),
)
"""gpu.throttle.<name> and the NVML clock-event reason bits that set it (nvml.h)."""

_UNAVAILABLE_HINTS = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 not found (no NVIDIA driver, or a container without "
    "the NVIDIA runtime)",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
}
_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission)
_FALLBACK = (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch)
_LOST = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_GpuNotFound)
_OTHER = (pynvml.NVMLError, UnicodeDecodeError)
_MAX_KEYS = 4096
_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
_VOLATILE_UNC = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
_COMPUTE_PROCS = "nvmlDeviceGetComputeRunningProcesses"
_GRAPHICS_PROCS = "nvmlDeviceGetGraphicsRunningProcesses"


class Reading(NamedTuple):
    """One value read from a device; `pid` is set for per-process series."""

    metric: str
    value: float
    pid: str = ""


@dataclass(frozen=True, slots=True)
class _Variant:
    """One way to read a group: the pynvml functions it calls and the reader."""

    names: tuple[str, ...]
    read: Callable[[Any, Any], list[Reading]]


class _Group:
    """Metrics read by one call; dropped together when NVML says NotSupported. Variants: newest first."""

    __slots__ = ("name", "variants")

    def __init__(self, name: str, *variants: _Variant) -> None:
        self.name = name
        self.variants = variants


def _one(fn: str, metric: str, *args: int, scale: float = 1.0) -> _Variant:
    def read(nvml: Any, h: Any) -> list[Reading]:
        return [Reading(metric, getattr(nvml, fn)(h, *args) * scale)]

    return _Variant((fn,), read)


def _utilization(nvml: Any, h: Any) -> list[Reading]:
    u = nvml.nvmlDeviceGetUtilizationRates(h)
    return [Reading("gpu.utilization", u.gpu), Reading("gpu.memory.utilization", u.memory)]


def _memory(version: int | None) -> _Variant:
    def read(nvml: Any, h: Any) -> list[Reading]:
        m = nvml.nvmlDeviceGetMemoryInfo(h, version=version) if version else nvml.nvmlDeviceGetMemoryInfo(h)
        return [Reading("gpu.memory.used", m.used), Reading("gpu.memory.total", m.total)]

    return _Variant(("nvmlDeviceGetMemoryInfo",), read)


def _throttle(fn: str) -> _Variant:
    def read(nvml: Any, h: Any) -> list[Reading]:
        bits = getattr(nvml, fn)(h)
        return [Reading(f"gpu.throttle.{name}", 1.0 if bits & mask else 0.0) for name, mask in THROTTLE_REASONS]

    return _Variant((fn,), read)


def _remapped_rows(nvml: Any, h: Any) -> list[Reading]:
    _corrected, uncorrectable, pending, failed = nvml.nvmlDeviceGetRemappedRows(h)
    return [
        Reading("gpu.remapped_rows.uncorrectable", uncorrectable),
        Reading("gpu.remapped_rows.pending", pending),
        Reading("gpu.remapped_rows.failed", failed),
    ]


def _retired_pages(nvml: Any, h: Any) -> list[Reading]:
    causes = (
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    )
    return [Reading("gpu.retired_pages", sum(len(nvml.nvmlDeviceGetRetiredPages(h, c)) for c in causes))]


def _processes(nvml: Any, h: Any) -> list[Reading]:
    procs = list(nvml.nvmlDeviceGetComputeRunningProcesses(h))
    try:
        procs += nvml.nvmlDeviceGetGraphicsRunningProcesses(h)
    except (*_UNSUPPORTED, *_FALLBACK):
        pass
    used: dict[int, float | None] = {}
    for p in procs:
        mem, prev = p.usedGpuMemory, used.get(p.pid)
        used[p.pid] = mem if prev is None else prev if mem is None else max(prev, mem)
    out = [Reading("gpu.processes", len(used))]
    out += [Reading("gpu.process.memory.used", m, str(pid)) for pid, m in sorted(used.items()) if m is not None]
    return out


_MEMORY = _Group("memory", _memory(pynvml.nvmlMemory_v2), _memory(None))
_PROCESSES = _Group("processes", _Variant((_COMPUTE_PROCS, _GRAPHICS_PROCS), _processes))
GPU_GROUPS: tuple[_Group, ...] = (
    _Group("utilization", _Variant(("nvmlDeviceGetUtilizationRates",), _utilization)),
    _MEMORY,
    _Group(
        "temperature",
        _one("nvmlDeviceGetTemperatureV", "gpu.temperature", pynvml.NVML_TEMPERATURE_GPU),
        _one("nvmlDeviceGetTemperature", "gpu.temperature", pynvml.NVML_TEMPERATURE_GPU),
    ),
    _Group(
        "temperature.slowdown",
        _one("nvmlDeviceGetTemperatureThreshold", "gpu.temperature.slowdown", _SLOWDOWN),
    ),
    _Group("power", _one("nvmlDeviceGetPowerUsage", "gpu.power", scale=1e-3)),
    _Group("power.limit", _one("nvmlDeviceGetEnforcedPowerLimit", "gpu.power.limit", scale=1e-3)),
    _Group("fan.speed", _one("nvmlDeviceGetFanSpeed", "gpu.fan.speed")),
    _Group("clock.sm", _one("nvmlDeviceGetClockInfo", "gpu.clock.sm", pynvml.NVML_CLOCK_SM)),
    _Group(
        "throttle",
        _throttle("nvmlDeviceGetCurrentClocksEventReasons"),
        _throttle("nvmlDeviceGetCurrentClocksThrottleReasons"),
    ),
    _Group("ecc.uncorrected", _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc.uncorrected", *_VOLATILE_UNC)),
    _Group("remapped_rows", _Variant(("nvmlDeviceGetRemappedRows",), _remapped_rows)),
    _Group("retired_pages", _Variant(("nvmlDeviceGetRetiredPages",), _retired_pages)),
    _Group(
        "retired_pages.pending",
        _one("nvmlDeviceGetRetiredPagesPendingStatus", "gpu.retired_pages.pending"),
    ),
    _PROCESSES,
)
"""What is read from each GPU at each poll, in order."""

MIG_GROUPS: tuple[_Group, ...] = (_MEMORY, _PROCESSES)
"""What is read from each MIG device (utilization, power and the like are not per MIG device)."""

LIFECYCLE_FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
)
NVML_FUNCTIONS: frozenset[str] = frozenset(
    LIFECYCLE_FUNCTIONS + tuple(n for g in GPU_GROUPS for v in g.variants for n in v.names)
)
"""Every pynvml function this source may call."""


class _GpuLost(Exception):
    """A device call said the GPU is gone."""


@dataclass(slots=True, eq=False)
class _Device:
    """A GPU or MIG device, its labels, and what NVML told us about it."""

    gpu: str
    uuid: str
    handle: Any
    labels: dict[str, str]
    lost: bool = False
    dropped: set[str] = field(default_factory=set)
    variant: dict[str, int] = field(default_factory=dict)
    mig: dict[int, _Device] = field(default_factory=dict)
    keys: dict[tuple[str, str], SeriesKey] = field(default_factory=dict)

    def key(self, metric: str, pid: str = "") -> SeriesKey:
        """The series of `metric` on this device (cached)."""
        key = self.keys.get((metric, pid))
        if key is None:
            if len(self.keys) > _MAX_KEYS:  # pids come and go: keep the cache bounded
                self.keys.clear()
            labels = {**self.labels, "pid": pid} if pid else self.labels
            key = self.keys[(metric, pid)] = SeriesKey(metric, make_labels(labels))
        return key


class NvmlSource:
    """Polls the local GPUs through NVML. See the module docstring for the metrics and their units.

    `nvml` is the `pynvml` module (the default) or an object with the same functions, such as
    `alertd.testing.FakeNvml`.
    """

    def __init__(self, cfg: NvmlConfig, *, nvml: Any = None) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self._cfg = cfg
        self._nvml: Any = pynvml if nvml is None else nvml
        self._host = socket.gethostname()
        self._groups = GPU_GROUPS if cfg.processes else tuple(g for g in GPU_GROUPS if g is not _PROCESSES)
        self._mig_groups = MIG_GROUPS if cfg.processes else (_MEMORY,)
        self._lock = threading.Lock()
        self._initialized = False
        self._closed = False
        self._next_init = -math.inf
        self._warned: set[str] = set()
        self._logged: set[tuple[str, str, str]] = set()
        self._devices: list[_Device] = []
        self._count = 0
        self._disabled: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether NVML is initialised and the GPUs are being read."""
        return self._initialized

    @property
    def disabled(self) -> str | None:
        """Why the source reads nothing (no library, no driver: `nvmlInit` failed), or None (reading, or not
        tried yet). The API and `/metrics` show such a source as disabled, not up."""
        return None if self._initialized else self._disabled

    @property
    def dropped(self) -> dict[str, set[str]]:
        """Per GPU label: the metric groups dropped because NVML does not support them there."""
        out = {d.gpu: set(d.dropped) for d in self._devices}
        out.update({m.gpu: set(m.dropped) for d in self._devices for m in d.mig.values()})
        return out

    async def poll(self, now: float) -> list[Sample]:
        """Read every GPU once (in a worker thread); [] while NVML is unavailable."""
        return await asyncio.to_thread(self._poll_sync, now)

    async def aclose(self) -> None:
        """Shut NVML down (once), after any poll in flight has finished."""
        await asyncio.to_thread(self._close_sync)

    # --- worker-thread side -----------------------------------------------------------------------
    def _close_sync(self) -> None:
        with self._lock:
            self._closed = True
            if self._initialized:
                self._initialized = False
                try:
                    self._nvml.nvmlShutdown()
                except pynvml.NVMLError as err:
                    log.warning("nvml source %r: nvmlShutdown failed: %s", self.name, err)

    def _poll_sync(self, now: float) -> list[Sample]:
        with self._lock:
            if self._closed or (not self._initialized and not self._try_init(now)):
                return []
            self._check_vanished()
            out: list[Sample] = []
            for dev in self._devices:
                if not dev.lost:
                    self._read_device(dev, now, out)
                out.append(Sample(dev.key("gpu.lost"), now, None, 1.0 if dev.lost else 0.0))
            return out

    def _try_init(self, now: float) -> bool:
        if now < self._next_init:
            return False
        self._next_init = now + self._cfg.retry_init
        try:
            self._nvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._init_failed(err)
            return False
        try:
            self._devices = self._enumerate()
        except pynvml.NVMLError as err:
            self._init_failed(err)
            with contextlib.suppress(pynvml.NVMLError):
                self._nvml.nvmlShutdown()
            return False
        self._initialized = True
        self._disabled = None
        level = logging.WARNING if self._warned else logging.INFO
        log.log(level, "nvml source %r: NVML ready, reading %d GPU(s)", self.name, len(self._devices))
        return True

    def _init_failed(self, err: BaseException) -> None:
        kind = type(err).__name__
        why = _UNAVAILABLE_HINTS.get(kind, f"NVML initialisation failed: {err}")
        self._disabled = f"{why}; nvmlInit is retried every {format_duration(self._cfg.retry_init)}"
        if kind in self._warned:
            log.debug("nvml source %r: nvmlInit still failing: %s", self.name, err)
            return
        self._warned.add(kind)
        log.warning(
            "nvml source %r disabled: %s; GPU metrics are off, nvmlInit is retried every %s",
            self.name,
            why,
            format_duration(self._cfg.retry_init),
        )

    def _enumerate(self) -> list[_Device]:
        nvml = self._nvml
        self._count = count = nvml.nvmlDeviceGetCount()
        devices: list[_Device] = []
        for i in self._cfg.devices if self._cfg.devices is not None else range(count):
            if not 0 <= i < count:
                log.warning("nvml source %r: no GPU with index %d (%d found)", self.name, i, count)
                continue
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                dev = self._device(str(i), h, {})
            except _LOST as err:
                dev = _Device(str(i), "", None, self._labels(str(i), "", "", {}))
                self._mark_lost(dev, str(err))
            except _OTHER as err:
                log.warning("nvml source %r: GPU %d skipped: %s", self.name, i, err)
                continue
            devices.append(dev)
        return devices

    def _labels(self, gpu: str, uuid: str, name: str, extra: dict[str, str]) -> dict[str, str]:
        base = {"source": self.name, "gpu": gpu, "gpu_uuid": uuid, "gpu_name": name, "host": self._host}
        return base | extra

    def _device(self, gpu: str, h: Any, extra: dict[str, str]) -> _Device:
        uuid, name = self._nvml.nvmlDeviceGetUUID(h), self._nvml.nvmlDeviceGetName(h)
        return _Device(gpu, uuid, h, self._labels(gpu, uuid, name, extra))

    def _check_vanished(self) -> None:
        """If NVML now counts fewer GPUs, find the ones that are gone (by UUID) and mark them lost."""
        try:
            count = self._nvml.nvmlDeviceGetCount()
        except _OTHER as err:
            self._log_once("*", "device count", err)
            return
        if count < self._count:
            for dev in self._devices:
                if dev.lost:
                    continue
                try:
                    self._nvml.nvmlDeviceGetHandleByUUID(dev.uuid)
                except _OTHER as err:
                    self._mark_lost(dev, f"vanished from NVML's device list ({err})")
        self._count = count

    def _read_device(self, dev: _Device, now: float, out: list[Sample]) -> None:
        try:
            for group in self._groups:
                self._read_group(dev, group, now, out)
            if self._cfg.mig and "mig" not in dev.dropped:
                self._read_mig(dev, now, out)
        except _GpuLost as lost:
            self._mark_lost(dev, str(lost))

    def _read_group(self, dev: _Device, group: _Group, now: float, out: list[Sample]) -> None:
        if group.name in dev.dropped:
            return
        i = dev.variant.get(group.name, 0)
        while i < len(group.variants):
            variant = group.variants[i]
            try:
                readings = variant.read(self._nvml, dev.handle)
            except _FALLBACK as err:  # an older driver: try the older call, for good
                i = dev.variant[group.name] = i + 1
                if i == len(group.variants):
                    self._drop(dev, group.name, err)
                continue
            except _UNSUPPORTED as err:
                self._drop(dev, group.name, err)
                return
            except _LOST as err:
                raise _GpuLost(str(err)) from err
            except _OTHER as err:
                self._log_once(dev.gpu, group.name, err)
                return
            out.extend(Sample(dev.key(r.metric, r.pid), now, None, float(r.value)) for r in readings)
            return

    def _read_mig(self, dev: _Device, now: float, out: list[Sample]) -> None:
        nvml = self._nvml
        try:
            if nvml.nvmlDeviceGetMigMode(dev.handle)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
                dev.mig.clear()
                return
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(dev.handle)
        except (*_UNSUPPORTED, *_FALLBACK) as err:
            self._drop(dev, "mig", err)
            return
        except _LOST as err:
            raise _GpuLost(str(err)) from err
        except _OTHER as err:
            self._log_once(dev.gpu, "mig", err)
            return
        for i in range(slots):
            try:
                h = nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, i)
                mig = dev.mig.get(i)
                if mig is None or mig.uuid != nvml.nvmlDeviceGetUUID(h):
                    mig = dev.mig[i] = self._device(f"{dev.gpu}/{i}", h, {"parent_gpu": dev.gpu})
            except _LOST as err:
                raise _GpuLost(str(err)) from err
            except _OTHER:  # an empty slot: NotFound
                dev.mig.pop(i, None)
                continue
            mig.handle = h
            for group in self._mig_groups:
                self._read_group(mig, group, now, out)

    def _drop(self, dev: _Device, what: str, err: BaseException) -> None:
        dev.dropped.add(what)
        log.debug("nvml source %r: GPU %s: %s not supported (%s), not asked again", self.name, dev.gpu, what, err)

    def _mark_lost(self, dev: _Device, why: str) -> None:
        dev.lost = True
        log.error(
            "nvml source %r: GPU %s (%s) is lost: %s; reporting gpu.lost=1 for it",
            self.name,
            dev.gpu,
            dev.uuid or "uuid unknown",
            why,
        )

    def _log_once(self, gpu: str, what: str, err: BaseException) -> None:
        key = (gpu, what, type(err).__name__)
        if key in self._logged:
            return
        self._logged.add(key)
        log.warning("nvml source %r: GPU %s: reading %s failed: %s (skipped, logged once)", self.name, gpu, what, err)
