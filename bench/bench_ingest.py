"""Benchmark of bulk TensorBoard ingest: alertd against TensorBoard's EventAccumulator and its Rust data server.

Run as `python bench/bench_ingest.py` (`make bench` runs it). In a temp dir it builds two files of
1,000,000 scalars each, each in its own logdir, with the real writers:

- "4-tag": 250,000 events of 4 `simple_value` scalars, written by TensorBoard's `EventFileWriter`;
- "torch": 1,000,000 events of one scalar, written by torch's `SummaryWriter.add_scalar` (skipped
  when torch is not installed).

Both writers write each record through TensorBoard's `RecordWriter`, which computes CRCs in pure
Python and opens the file again for every record (about 50 us a record); to build the files in
seconds rather than a minute, the builder gives that `RecordWriter` google_crc32c's CRC (checked
here to equal TensorBoard's own on the first records) and a buffered file in place of the per-record
reopen. The bytes written are the same: the records, their framing and the events are the writers'.

Then, on the same files, side by side:

- alertd: files -> samples -> buffer, as `alertd dry-run --source tensorboard:DIR` collects them
  (one `TensorBoardSource.read_new()` of a fresh source) and as the service buffers a poll (one
  `SeriesBuffer.append` of those samples); best of 3, wall clock (the CPU time of the best run is
  shown too; alertd is single-threaded). The dry-run then replays the samples (sorted by time, fed
  to the buffer 256 at a time, the runs tracked and the rules evaluated after each chunk): that
  replay, with no rules and with rules/default.yaml, is timed once each and shown on its own line; it
  is not part of the ratio. Before the column-wise paths of the replay (run tracking, small appends,
  time order), 4-tag took 2.39-2.46 s with no rules and 15.2 s with the default rules on the 2-CPU dev
  machine; `bench_replay.py` sets the replay with the default rules beside its anchor (Rust load + pandas);
- TensorBoard's `EventAccumulator(path, size_guidance={"scalars": 0}).Reload()`, once (it is slow);
- TensorBoard's Rust data server (`tensorboard_data_server`, what `tensorboard` runs by default), as
  `tensorboard` starts it (`--reload once`, default checksumming: only records that fail to parse)
  but with `--samples-per-plugin scalars=all` so that it keeps every point, as alertd does. Timed in
  wall clock from process start until its gRPC `ListScalars` shows the last step of every tag (it
  commits the points of a run as it reads them, so that is when it has read the whole file; the
  point count is then checked with `ReadScalars`). The time to its port file (process start, no data
  read) is shown as `startup`; the ratio uses the time minus that startup. The server reads with
  several threads, so its CPU time (from `getrusage` after it exits) is printed too. The same run
  with `--checksum` (every record's CRC checked, as alertd always does) is shown for reference.

Nothing is asserted on timings; the scalar counts must agree.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer import record_writer
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.buffer import SeriesBuffer
from alertd.config import load_config
from alertd.dryrun import replay
from alertd.rules.evaluate import RuleSet
from alertd.sources.config import TensorBoardConfig
from alertd.sources.tensorboard import TensorBoardSource
from alertd.sources.tensorboard.tfrecord import masked_crc32c

SCALARS = 1_000_000
TAGS = ("train/loss", "train/grad_norm", "train/lr", "train/tokens_per_second")
TARGET = 3.0


@contextlib.contextmanager
def quick_records() -> Iterator[None]:
    """TensorBoard's RecordWriter with google_crc32c's CRC (verified equal to its own)."""
    original = record_writer.masked_crc32c
    for n in (0, 1, 7, 30, 31, 200):
        data = bytes(range(n % 256)) * (n // 256 + 1)
        assert masked_crc32c(data) == original(data)
    record_writer.masked_crc32c = masked_crc32c
    try:
        yield
    finally:
        record_writer.masked_crc32c = original


def buffered(writer: EventFileWriter) -> None:
    """Make the writer's RecordWriter append to one buffered file instead of reopening it per record."""
    records = writer._async_writer._writer  # the build shortcut: see the docstring
    gfile = records._writer
    gfile.close()
    records._writer = open(writer._file_name, "ab")  # noqa: SIM115


def build_four_tag(logdir: str) -> None:
    """250,000 events of 4 simple_value scalars, with TensorBoard's EventFileWriter."""
    writer = EventFileWriter(logdir, max_queue_size=1000)
    buffered(writer)
    for step in range(SCALARS // len(TAGS)):
        values = [summary_pb2.Summary.Value(tag=t, simple_value=1.0 / (step + 1) + i) for i, t in enumerate(TAGS)]
        summary = summary_pb2.Summary(value=values)
        writer.add_event(event_pb2.Event(wall_time=1.7e9 + step * 0.1, step=step, summary=summary))
    writer.close()


def build_torch(logdir: str) -> bool:
    """1,000,000 scalars with torch's SummaryWriter.add_scalar; False when torch is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return False
    writer = SummaryWriter(logdir, max_queue=1000)
    buffered(writer._get_file_writer().event_writer)
    add = writer.add_scalar
    for step in range(SCALARS):
        add("train/loss", 1.0 / (step + 1), step)
    writer.close()
    return True


def event_file(logdir: str) -> str:
    (name,) = os.listdir(logdir)
    return os.path.join(logdir, name)


def alertd_ingest(logdir: str) -> tuple[float, float, int]:
    """Best of 3: (wall seconds, CPU seconds of that run, samples)."""
    logging.getLogger("alertd").setLevel(logging.WARNING)
    cfg = TensorBoardConfig(name="bench", type="tensorboard", logdir=logdir)
    best = (float("inf"), 0.0, 0)
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        samples = TensorBoardSource(cfg).read_new()
        buffer = SeriesBuffer()
        buffer.append(samples)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu, len(samples))
        del samples, buffer
    return best


DEFAULT_RULES = Path(__file__).resolve().parents[1] / "rules" / "default.yaml"


def dry_run_replay(logdir: str, ruleset: RuleSet) -> float:
    """The dry-run's replay of the samples read, with `ruleset`: wall seconds."""
    samples = TensorBoardSource(TensorBoardConfig(name="bench", type="tensorboard", logdir=logdir)).read_new()
    t0 = time.perf_counter()
    for _ in replay(ruleset, samples):
        pass
    return time.perf_counter() - t0


def accumulator(path: str) -> tuple[float, int]:
    """EventAccumulator.Reload once: (wall seconds, scalars)."""
    t0 = time.perf_counter()
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    wall = time.perf_counter() - t0
    return wall, sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])


def data_server(logdir: str, steps: dict[str, int], checksum: bool = False) -> dict[str, Any]:
    """Run the data server over `logdir` until it has every tag's last step; its times and point count."""
    import grpc
    from tensorboard.data.proto import data_provider_pb2 as pb
    from tensorboard.data.proto import data_provider_pb2_grpc as pb_grpc
    from tensorboard_data_server import server_binary

    with tempfile.TemporaryDirectory() as tmp:
        port_file, log_file = os.path.join(tmp, "port"), os.path.join(tmp, "log")
        args = [server_binary(), f"--logdir={logdir}", "--reload=once", "--port=0", f"--port-file={port_file}"]
        args += ["--samples-per-plugin=scalars=all", "--die-after-stdin", "--verbose"]
        if checksum:
            args.append("--checksum")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log_file, "wb") as log:
            t0 = time.perf_counter()
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=log)
        try:
            while not (os.path.exists(port_file) and Path(port_file).read_text().endswith("\n")):
                time.sleep(0.001)
            startup = time.perf_counter() - t0
            port = int(Path(port_file).read_text())
            options = [("grpc.max_receive_message_length", 256 << 20)]
            with grpc.insecure_channel(f"localhost:{port}", options=options) as channel:
                stub = pb_grpc.TensorBoardDataProviderStub(channel)
                request = pb.ListScalarsRequest(plugin_filter=pb.PluginFilter(plugin_name="scalars"))
                while True:
                    got = {t.tag_name: t.metadata.max_step for r in stub.ListScalars(request).runs for t in r.tags}
                    if got == steps:
                        break
                    time.sleep(0.005)
                done = time.perf_counter() - t0
                read = pb.ReadScalarsRequest(
                    plugin_filter=pb.PluginFilter(plugin_name="scalars"), downsample=pb.Downsample(num_points=SCALARS)
                )
                points = sum(len(t.data.step) for r in stub.ReadScalars(read).runs for t in r.tags)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cycle = re.search(
            r"Finished load cycle \(([\d.]+)(ns|µs|us|ms|s)\)", Path(log_file).read_text("utf-8", "replace")
        )
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    seconds = float(cycle[1]) * _UNITS[cycle[2]] if cycle else math.nan
    return {"read": done - startup, "startup": startup, "cpu": cpu, "points": points, "cycle": seconds}


_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def compare(name: str, logdir: str, last_steps: dict[str, int]) -> None:
    path = event_file(logdir)
    size = os.path.getsize(path) / 1e6
    wall, cpu, count = alertd_ingest(logdir)
    replayed = dry_run_replay(logdir, RuleSet([]))
    with_rules = dry_run_replay(logdir, RuleSet(load_config([str(DEFAULT_RULES)]).rules))
    ea, ea_count = accumulator(path)
    runs = [data_server(logdir, last_steps) for _ in range(3)]
    server = min(runs, key=lambda r: r["read"])
    checked = data_server(logdir, last_steps, checksum=True)
    points = {r["points"] for r in [*runs, checked]}
    assert {count, ea_count, *points} == {SCALARS}, (count, ea_count, points)
    read = server["read"]
    print(
        f"ingest {name} 1M scalars ({size:.0f} MB): alertd {wall:.2f} s (cpu {cpu:.2f} s), "
        f"EventAccumulator {ea:.1f} s ({ea / wall:.1f}x), data server {read:.2f} s "
        f"(alertd/server {wall / read:.1f}x, target <= {TARGET:.0f}x)",
        flush=True,
    )
    print(
        f"  data server {name}: best of 3 {read:.2f} s after a {server['startup'] * 1e3:.0f} ms startup "
        f"(its log: load cycle {server['cycle']:.2f} s; cpu {server['cpu']:.2f} s); "
        f"with --checksum {checked['read']:.2f} s (load cycle {checked['cycle']:.2f} s)",
        flush=True,
    )
    print(
        f"  alertd dry-run {name}: the replay after the ingest (no rules) {replayed:.2f} s, "
        f"with rules/default.yaml {with_rules:.2f} s",
        flush=True,
    )


def main() -> None:
    """Build both files, then print one line per file."""
    logging.basicConfig(level=logging.WARNING)
    keep = sys.argv[1] if len(sys.argv) > 1 else None  # an existing dir: build there once, reuse after
    with contextlib.ExitStack() as stack:
        root = keep or stack.enter_context(tempfile.TemporaryDirectory())
        four, torch_dir = os.path.join(root, "four_tag"), os.path.join(root, "torch")
        t0 = time.perf_counter()
        with quick_records():
            if not os.path.isdir(four):
                os.makedirs(four)
                build_four_tag(four)
            has_torch = os.path.isdir(torch_dir)
            if not has_torch:
                os.makedirs(torch_dir)
                has_torch = build_torch(torch_dir)
        print(f"(built the files in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        last = SCALARS // len(TAGS) - 1
        compare("4-tag", four, dict.fromkeys(TAGS, last))
        if has_torch:
            compare("torch", torch_dir, {"train/loss": SCALARS - 1})
        else:
            print("ingest torch 1M scalars: skipped (torch is not installed)")


if __name__ == "__main__":
    main()
