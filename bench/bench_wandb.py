"""Benchmarks of the W&B sources (prints figures; asserts nothing).

1. `wandb` source against the fake W&B server on 127.0.0.1: HTTP requests of one steady-state poll
   of 10 running runs that each logged one new row since the previous poll.
2. `wandb_dir` read throughput: an offline run written by the real `wandb` SDK (20 000 rows of 8
   metrics, system stats on), its records re-framed 10 times over (as the SDK frames them) into one
   large file, read from the start by `WandbDirSource.read_new()`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "wandb"))
sys.path.insert(0, str(HERE.parent / "src"))

from fake_wandb import API_KEY, FakeRun, FakeWandb  # noqa: E402
from wandb_frames import frame, payloads_of  # noqa: E402

from alertd.sources.config import WandbConfig, WandbDirConfig  # noqa: E402
from alertd.sources.wandb.api import WandbSource  # noqa: E402
from alertd.sources.wandb.offline import WandbDirSource, find_run_files  # noqa: E402
from alertd.sources.wandb.proto import decode_record  # noqa: E402

GEN = """
import sys, math, wandb
run = wandb.init(project="bench", dir=sys.argv[1], id="big",
                 settings=wandb.Settings(mode="offline", x_stats_sampling_interval=0.5))
for i in range(20000):
    run.log({"train/loss": 1.0 / (i + 1), "train/lr": 1e-3, "train/grad_norm": 1.5, "eval/loss": 0.5,
             "eval/acc": 0.9, "tokens_per_s": 12345.0, "gpu_mem": 3.2,
             "nan_check": math.nan if i % 997 == 0 else 0.0})
run.finish()
"""


async def bench_poll() -> int:
    with FakeWandb(API_KEY) as fake:
        runs = [
            fake.add_run(FakeRun(f"r{i}", history=[{"_step": 0, "_timestamp": 1e9, "loss": 1.0}])) for i in range(10)
        ]
        src = WandbSource(WandbConfig(name="wb", type="wandb", project="me/proj", base_url=fake.url, api_key=API_KEY))
        await src.poll(1e9)
        for run in runs:
            run.history.append({"_step": 1, "_timestamp": 1e9 + 1, "loss": 0.5})
        before = src.requests
        await src.poll(1e9 + 30)
        await src.aclose()
        return src.requests - before


def bench_dir() -> tuple[int, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "WANDB_SILENT": "true",
            "WANDB_ERROR_REPORTING": "false",
            "WANDB_MODE": "offline",
        }
        subprocess.run([sys.executable, "-c", GEN, tmp], env=env, check=True, timeout=300)
        payloads = payloads_of(Path(find_run_files(tmp)[0]).read_bytes())
        big = Path(tmp) / "big" / "run-big.wandb"
        big.parent.mkdir()
        big.write_bytes(frame(payloads * 10))
        src = WandbDirSource(WandbDirConfig(name="wbo", type="wandb_dir", path=str(big.parent)))
        start = time.perf_counter()
        samples = src.read_new()
        elapsed = time.perf_counter() - start
        assert samples and src.corrupt_records == 0
        used = sum(1 for p in payloads if decode_record(p) is not None) * 10
        details = (
            f"{len(samples)} samples, {big.stat().st_size / 1e6:.1f} MB, "
            f"{used} history/stats/run/exit records, {elapsed and len(samples) / elapsed:.0f} samples/s"
        )
        return len(payloads) * 10, elapsed, details


def main() -> None:
    n = asyncio.run(bench_poll())
    print(f"wandb poll: {n} requests for 10 running runs in steady state (target: 1 per run + 1 runs list)")
    records, elapsed, details = bench_dir()
    print(f"wandb_dir read: {records / elapsed:.0f} records/s ({records} records in {elapsed:.2f} s)")
    print(f"# {details}", file=sys.stderr)


if __name__ == "__main__":
    main()
