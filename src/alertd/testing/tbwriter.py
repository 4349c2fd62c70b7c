"""Write real TensorBoard event files with tensorboard's own writer (for demos, tests and benchmarks).

The file name carries this process's host and pid (`events.out.tfevents.<time>.<host>.<pid>.<n>`),
as torch's SummaryWriter writes it, so the kill notifier's `writer` target can find the process.
"""

from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.sources.tensorboard.tfrecord import frame


def scalar_event(tag: str, value: float, step: int, wall_time: float | None = None) -> event_pb2.Event:
    """One event holding one scalar, as `add_scalar` writes it (the wall time: now, unless given)."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(wall_time=time.time() if wall_time is None else wall_time, step=step, summary=summary)


def scalar_record(tag: str, value: float, step: int, wall_time: float | None = None) -> bytes:
    """That event framed as a record, byte for byte what the writer appends: for appending with one
    `write()` each, faster than a writer can flush."""
    return frame(scalar_event(tag, value, step, wall_time).SerializeToString())


class ScalarWriter:
    """Logs scalars the way a training loop does: `add_scalar(tag, value, step)`, then `flush()`."""

    def __init__(self, logdir: str | Path, *, flush_secs: float = 3600.0) -> None:
        Path(logdir).mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(logdir), flush_secs=flush_secs)

    @property
    def path(self) -> str:
        """The event file being written."""
        name = self._writer._general_file_writer.filename
        return name.decode() if isinstance(name, bytes) else str(name)

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Queue one scalar (NaN and Inf are written as they are)."""
        self._writer.add_event(scalar_event(tag, value, step, wall_time))

    def flush(self) -> None:
        """Write everything queued to the file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._writer.close()
