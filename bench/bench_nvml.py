"""Benchmark of the NVML source over the fake NVML (8 GPUs): cost of one poll, CPU use at 1 Hz.

Run: PYTHONPATH=src python bench/bench_nvml.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from alertd.sources.config import NvmlConfig
from alertd.sources.nvml import NvmlSource
from alertd.testing import FakeNvml, FakeProcess, make_gpus

GPUS = 8


def fleet() -> FakeNvml:
    """8 busy GPUs, one training process each."""
    gpus = make_gpus(GPUS)
    for i, gpu in enumerate(gpus):
        gpu.utilization, gpu.memory_used, gpu.temperature = 95, 70 * 2**30, 65 + i
        gpu.processes = [FakeProcess(pid=10_000 + i, used_memory=70 * 2**30)]
    return FakeNvml(gpus)


def source() -> NvmlSource:
    """A source over a fresh fake fleet."""
    return NvmlSource(NvmlConfig(type="nvml", name="gpus", interval=1.0), nvml=fleet())


async def poll_cost(rounds: int = 300) -> tuple[float, int]:
    """Mean wall time of one poll (ms), and the samples one poll returns."""
    src = source()
    samples = await src.poll(0.0)  # nvmlInit and enumeration happen here
    start = time.perf_counter()
    for i in range(rounds):
        samples = await src.poll(float(i + 1))
    elapsed = time.perf_counter() - start
    await src.aclose()
    return elapsed / rounds * 1000, len(samples)


async def cpu_at_1hz(seconds: float) -> float:
    """Percent of one core used while the source alone polls once a second."""
    src = source()
    await src.poll(time.time())
    loop = asyncio.get_running_loop()
    wall0, cpu0 = loop.time(), time.process_time()
    tick = wall0
    while loop.time() - wall0 < seconds:
        await src.poll(time.time())
        tick += 1.0
        await asyncio.sleep(max(0.0, tick - loop.time()))
    cpu, wall = time.process_time() - cpu0, loop.time() - wall0
    await src.aclose()
    return cpu / wall * 100


def main() -> None:
    """Print the two figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="wall time of the 1 Hz run")
    args = parser.parse_args()
    ms, n = asyncio.run(poll_cost())
    print(f"nvml poll of {GPUS} fake GPUs: {ms:.2f} ms ({n} samples)")
    pct = asyncio.run(cpu_at_1hz(args.seconds))
    print(f"nvml source CPU at 1 Hz with {GPUS} fake GPUs: {pct:.2f} % of one core (target < 1 %)")


if __name__ == "__main__":
    main()
