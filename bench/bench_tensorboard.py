"""Benchmark of the tensorboard source's tail polls on a large file.

Run as `python bench/bench_tensorboard.py`. Builds a 250,000-event file (4 scalars per event,
`simple_value`, as torch's `add_scalar` writes them) with TensorBoard's own `EventFileWriter` (sped up
as in `bench_ingest.py`, which benchmarks the bulk ingest against EventAccumulator and the Rust data
server), reads it whole with `TensorBoardSource.read_new()`, then appends one event at a time (framed by
`tfrecord.frame`, byte for byte what the writer writes; the tests check that) and times `read_new()` in
wall-clock time (median of 51 polls).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bench_ingest import buffered, quick_records
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.sources.config import TensorBoardConfig
from alertd.sources.tensorboard import TensorBoardSource
from alertd.sources.tensorboard.tfrecord import frame

EVENTS = 250_000
TAGS = ("train/loss", "train/grad_norm", "train/lr", "train/tokens_per_second")


def event(step: int) -> event_pb2.Event:
    """One event holding four scalars, as a trainer logs them."""
    values = [summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / (step + 1) + i) for i, tag in enumerate(TAGS)]
    return event_pb2.Event(wall_time=1.7e9 + step * 0.1, step=step, summary=summary_pb2.Summary(value=values))


def build(logdir: str) -> str:
    """Write the benchmark file with EventFileWriter; return its path."""
    writer = EventFileWriter(logdir, max_queue_size=1000)
    buffered(writer)
    for step in range(EVENTS):
        writer.add_event(event(step))
    writer.close()
    (name,) = os.listdir(logdir)
    return os.path.join(logdir, name)


def main() -> None:
    """Print the benchmark line."""
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as logdir:
        t0 = time.perf_counter()
        with quick_records():
            path = build(logdir)
        print(
            f"(built {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s)",
            file=sys.stderr,
        )
        src = TensorBoardSource(TensorBoardConfig(name="bench", type="tensorboard", logdir=logdir))
        count = len(src.read_new())
        assert count == EVENTS * len(TAGS), count
        polls = []
        with open(path, "ab") as f:
            for step in range(EVENTS, EVENTS + 51):
                f.write(frame(event(step).SerializeToString()))
                f.flush()
                t0 = time.perf_counter()
                got = src.read_new()
                polls.append(time.perf_counter() - t0)
                assert len(got) == len(TAGS), len(got)
        size = os.path.getsize(path) / 1e6
        print(
            f"tensorboard tail poll after 1 new event on a {size:.0f} MB file: "
            f"{statistics.median(polls) * 1e3:.3f} ms (target < 1 ms)"
        )


if __name__ == "__main__":
    main()
