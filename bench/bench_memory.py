"""Benchmark of the service's memory holding 1,000,000 samples, beside TensorBoard's Rust data server holding the
same points.

    python bench/bench_memory.py [DIR]

The file is `bench_ingest.py`'s "4-tag" one (250,000 events of 4 scalars, TensorBoard's `EventFileWriter`; built
in DIR once when given). Side by side:

- alertd: `python -m alertd run` with one `tensorboard` source on the file's logdir and a buffer that keeps every
  sample (`max_samples: 262144`, `max_age` 100 years); its resident memory (`VmRSS`) once it has said that its
  start-up read is over and its CPU use has settled, minus that of the same alertd on an empty logdir: bytes per
  buffered sample;
- anchor: the Rust data server (`--samples-per-plugin scalars=all`, so that it keeps every point), its `VmRSS`
  once its load cycle is logged, minus that of the same server on an empty logdir: bytes per point.

The goal (issue "Performance"): at most 64 bytes of service memory per buffered sample. Figures only.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import SCALARS, build_four_tag, quick_records

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 1s}}]
buffer: {{max_samples: 262144, max_age: 876000h}}
rules: [{{name: loss_not_finite, metric: ["*loss"], condition: nonfinite}}]
"""
GOAL = 64


def rss(pid: int) -> int:
    """Resident bytes of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"bench_memory: no VmRSS for pid {pid}")


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], failed: str) -> None:
    """Until the process's log holds `text` (5 minutes at most; the process must live meanwhile)."""
    deadline = time.monotonic() + 300
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"bench_memory: {failed}; see {log}")
        time.sleep(0.2)


def alertd_rss(work: Path, logdir: Path, label: str) -> int:
    """alertd's resident bytes once its start-up read is over and it is idle."""
    rules = work / f"rules-{label}.yaml"
    rules.write_text(RULES.format(logdir=logdir))
    log = work / f"alertd-{label}.log"
    cmd = [sys.executable, "-m", "alertd", "run", "--rules", str(rules), "--state-dir", str(work / f"state-{label}")]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_for(log, "start-up read over", proc, "alertd did not finish its start-up read")
        time.sleep(5.0)  # the slices ingested, a tick or two
        return rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def server_rss(work: Path, logdir: Path, label: str) -> int:
    """The Rust data server's resident bytes once its load cycle is over."""
    from tensorboard_data_server import server_binary

    log = work / f"server-{label}.log"
    args = [server_binary(), f"--logdir={logdir}", "--reload=once", "--port=0", "--samples-per-plugin=scalars=all"]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*args, "--die-after-stdin", "--verbose"], stdin=subprocess.PIPE, stderr=out)
    try:
        wait_for(log, "Finished load cycle", proc, "the data server did not finish loading")
        time.sleep(1.0)
        return rss(proc.pid)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


def main() -> None:
    keep = sys.argv[1] if len(sys.argv) > 1 else None
    with contextlib.ExitStack() as stack:
        root = Path(keep or stack.enter_context(tempfile.TemporaryDirectory()))
        four, empty = root / "four_tag", root / "empty"
        with quick_records():
            if not four.is_dir():
                four.mkdir(parents=True)
                build_four_tag(str(four))
        empty.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            mine = alertd_rss(work, four, "full") - alertd_rss(work, empty, "empty")
            theirs = server_rss(work, four, "full") - server_rss(work, empty, "empty")
        print(
            f"memory holding 1M samples (4-tag file): alertd {mine / 1e6:.0f} MB above an idle one, "
            f"{mine / SCALARS:.0f} B/sample (goal <= {GOAL}); Rust data server {theirs / 1e6:.0f} MB, "
            f"{theirs / SCALARS:.0f} B/point ({mine / theirs:.1f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
