"""alertd's CPU use while it watches one training run (TensorBoard, one scalar a second) and 8 GPUs (NVML
at 1 Hz), on the default rules: the overhead a user pays for running it beside training.

    python bench/bench_service_cpu.py

The service runs in a child process with the fake NVML of 8 GPUs (these machines have none) and the
real TensorBoard source; the parent writes the events and reads the child's CPU time from /proc.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP, MEASURE = 5.0, 30.0


def child(rules: str, state: str) -> None:
    from alertd.service import Service
    from alertd.service.main import serve as _main
    from alertd.sources.nvml import NvmlSource
    from alertd.testing.fake_nvml import FakeNvml, make_gpus

    class Bench(Service):
        def open(self) -> None:
            super().open()
            cfg = next(s for s in self.config.sources if s.type == "nvml")
            self.sources[cfg.name] = NvmlSource(cfg, nvml=FakeNvml(make_gpus(8)))  # type: ignore[arg-type]

    asyncio.run(_main(Bench([rules], state=Path(state)), None))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="alertd-cpu-"))
    rules = work / "rules.yaml"
    text = (Path(__file__).resolve().parent.parent / "rules" / "default.yaml").read_text()
    rules.write_text(text.replace("interval: 2s}", "interval: 1s}"))
    env = {**os.environ, "ALERTD_LOGDIR": str(work / "runs")}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(rules), str(work / "state")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "alertd.log", "wb"),  # noqa: SIM115 - the child owns it until it exits
    )
    from alertd.testing.tbwriter import ScalarWriter

    writer = ScalarWriter(work / "runs" / "exp1")
    step, start = 0, time.monotonic()
    cpu0 = None
    while time.monotonic() - start < WARMUP + MEASURE:
        writer.add_scalar("train/loss", 2.0 * math.exp(-step / 1000), step)
        writer.add_scalar("train/grad_norm", 1.0, step)
        writer.flush()
        step += 1
        if cpu0 is None and time.monotonic() - start >= WARMUP:
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(1.0)
    used = cpu_seconds(proc.pid) - (cpu0 or 0.0)
    elapsed = time.monotonic() - t0
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    writer.close()
    print(
        f"service CPU watching 1 run (1 event/s) and 8 GPUs at 1 Hz on the default rules: "
        f"{100 * used / elapsed:.2f} % of one core over {elapsed:.0f} s (target < 1 %)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
