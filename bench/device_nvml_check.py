"""Check the NVML source against a real GPU machine. Stdlib + pynvml + alertd (PYTHONPATH=src).

Runs nvidia-smi, polls NvmlSource on the real pynvml once a second (with a small torch load when torch
and a GPU are there), prints the last poll as a table, a summary (metrics seen, dropped as not supported,
errors), a cross-check against nvidia-smi, then nvidia-smi again. Finishes in under 60 s; never raises.

Run: PYTHONPATH=src python bench/device_nvml_check.py [--seconds 30] [--no-load]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import subprocess
import threading
import time
import traceback
from collections import defaultdict
from typing import Any

FIELDS = [
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "clocks_event_reasons.active",
]
START = time.monotonic()


def nvidia_smi() -> dict[str, dict[str, str]]:
    """Print `nvidia-smi --query-gpu` (dropping fields this version rejects); return rows by index."""
    fields = list(FIELDS)
    while fields:
        try:
            proc = subprocess.run(
                ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            print(f"nvidia-smi: not run: {err}")
            return {}
        if proc.returncode == 0:
            print(proc.stdout.rstrip())
            lines = [ln.split(", ") for ln in proc.stdout.strip().splitlines()]
            names = [h.split(" [")[0] for h in lines[0]] if lines else []
            return {row[0]: dict(zip(names, row, strict=False)) for row in lines[1:]}
        bad = next((f for f in fields if f in proc.stdout + proc.stderr), None)
        if bad is None or bad == "index":
            print(f"nvidia-smi failed ({proc.returncode}): {(proc.stdout + proc.stderr).strip()[:300]}")
            return {}
        print(f"nvidia-smi: field {bad} not accepted here, dropped")
        fields.remove(bad)
    return {}


class Errors(logging.Handler):
    """Keeps the source's warnings and errors."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def start_load(stop: threading.Event) -> str:
    """A small matmul loop on cuda:0 in a thread, if torch and a GPU are there."""
    try:
        import torch
    except Exception as err:
        return f"no load (torch not importable: {type(err).__name__})"
    if not torch.cuda.is_available():
        return "no load (torch sees no GPU)"

    def run() -> None:
        with contextlib.suppress(Exception):
            a = torch.randn(4096, 4096, device="cuda:0")
            while not stop.is_set():
                for _ in range(20):
                    a = torch.tanh(a @ a)
                torch.cuda.synchronize()

    threading.Thread(target=run, daemon=True).start()
    return "load: 4096x4096 matmul loop on cuda:0"


async def watch(seconds: float) -> tuple[list[Any], Any, list[float]]:
    """Poll a real NvmlSource once a second; return the last samples, the source and poll times."""
    from alertd.sources.config import NvmlConfig
    from alertd.sources.nvml import NvmlSource

    src = NvmlSource(NvmlConfig(type="nvml", name="device-check", interval=1.0))
    last: list[Any] = []
    took: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and time.monotonic() - START < 50:
            t0 = time.perf_counter()
            samples = list(await src.poll(time.time()))
            took.append((time.perf_counter() - t0) * 1000)
            last = samples or last
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
    finally:
        await src.aclose()
    return last, src, took


def table(samples: list[Any]) -> None:
    """One row per metric (per pid), one column per GPU."""
    cells: dict[str, dict[str, float]] = defaultdict(dict)
    gpus: list[str] = []
    for s in samples:
        gpu = s.series.label("gpu") or "?"
        gpus += [gpu] if gpu not in gpus else []
        pid = s.series.label("pid")
        cells[s.series.metric + (f"[pid {pid}]" if pid else "")][gpu] = s.value
    print(f"{'metric':<40}" + "".join(f"{g:>14}" for g in gpus))
    for metric in sorted(cells):
        row = "".join(f"{cells[metric][g]:>14.6g}" if g in cells[metric] else f"{'-':>14}" for g in gpus)
        print(f"{metric:<40}{row}")


def cross_check(samples: list[Any], smi: dict[str, dict[str, str]]) -> None:
    """Our memory.total / power.limit / temperature beside nvidia-smi's."""
    ours = {(s.series.label("gpu"), s.series.metric): s.value for s in samples}
    for idx, row in smi.items():
        mem = ours.get((idx, "gpu.memory.total"))
        lim = ours.get((idx, "gpu.power.limit"))
        tmp = ours.get((idx, "gpu.temperature"))
        print(
            f"GPU {idx}: memory.total smi={row.get('memory.total')} ours="
            f"{'-' if mem is None else f'{mem / 2**20:.0f} MiB'}; power.limit smi={row.get('power.limit')} "
            f"ours={'-' if lim is None else f'{lim:.2f} W'}; temperature smi={row.get('temperature.gpu')} "
            f"ours={'-' if tmp is None else f'{tmp:.0f}'}"
        )


def main() -> None:
    """Run every step; print errors instead of raising."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--no-load", action="store_true")
    args = parser.parse_args()
    errors = Errors()
    logging.getLogger("alertd").addHandler(errors)
    logging.getLogger("alertd").setLevel(logging.INFO)
    print("== nvidia-smi (before)")
    smi = nvidia_smi()
    stop = threading.Event()
    try:
        print("==", "no load (--no-load)" if args.no_load else start_load(stop))
        last, src, took = asyncio.run(watch(args.seconds))
        print(
            f"== last poll: {len(last)} samples; {len(took)} polls, poll time mean "
            f"{sum(took) / max(1, len(took)):.2f} ms, max {max(took, default=0):.2f} ms"
        )
        table(last)
        print("== summary")
        print("metrics seen:", ", ".join(sorted({s.series.metric for s in last})) or "none")
        print("NVML enabled:", src.enabled)
        for gpu, dropped in sorted(src.dropped.items()):
            print(f"dropped as not supported on GPU {gpu}: {', '.join(sorted(dropped)) or 'none'}")
        print("errors/warnings:", len(errors.lines))
        for line in errors.lines:
            print("  " + line)
        print("== cross-check with nvidia-smi")
        cross_check(last, smi)
    except Exception:
        print("device check failed:")
        traceback.print_exc()
    finally:
        stop.set()
    print("== nvidia-smi (after)")
    nvidia_smi()
    print(f"== done in {time.monotonic() - START:.1f} s")


if __name__ == "__main__":
    main()
