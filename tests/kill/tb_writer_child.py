"""A training-like child that writes a real TensorBoard event file (a loss of 1.0, then NaN), for the kill tests.

Usage: tb_writer_child.py LOGDIR READY MODE [HOST]

MODE says how the event file is written, as the writers found in the wild do:
- `open`: through tensorboard's RecordWriter over a file object kept open for writing, as TensorFlow's
  GFile and tensorboardX do; the name is torch's, `events.out.tfevents.<secs>.<HOST>.<pid>.0`.
- `hold`: tensorboard's EventFileWriter (which, without TensorFlow, opens the file only while it
  writes), plus `alertd.runs.writers.hold()` on it, as alertd's training callback does.
- `stub`: tensorboard's EventFileWriter alone: the file is never held open between writes.
- `close`: as `open`, then the file is closed as soon as READY.close appears (READY.closed says done);
  the process keeps running.

It writes READY (the event file's path) once the NaN is on disk. On SIGINT it writes READY.ckpt and exits
0. It exits 3 after 30 s, so a failed test leaves nothing behind for long.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.summary.writer.record_writer import RecordWriter

from alertd.runs.writers import hold

logdir, ready, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
host = sys.argv[4] if len(sys.argv) > 4 else socket.gethostname()


def scalar(step: int, value: float) -> event_pb2.Event:
    """One `loss` scalar event."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=value)])
    return event_pb2.Event(wall_time=time.time(), step=step, summary=summary)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """Save the "checkpoint" and leave cleanly."""
    Path(str(ready) + ".ckpt").write_text("saved")
    sys.exit(0)


signal.signal(signal.SIGINT, on_sigint)
logdir.mkdir(parents=True, exist_ok=True)
held: object = None
if mode in ("open", "close"):
    path = logdir / f"events.out.tfevents.{int(time.time())}.{host}.{os.getpid()}.0"
    f = open(path, "wb")  # noqa: SIM115  (kept open on purpose: that is what is being tested)
    rw = RecordWriter(f)
    rw.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
    rw.write(scalar(1, 1.0).SerializeToString())
    rw.write(scalar(2, math.nan).SerializeToString())
    rw.flush()
    held = f
else:
    w = EventFileWriter(str(logdir), flush_secs=3600)
    w.add_event(scalar(1, 1.0))
    w.add_event(scalar(2, math.nan))
    w.flush()
    name = w._general_file_writer.filename
    path = Path(name.decode() if isinstance(name, bytes) else name)
    if mode == "hold":
        held = hold(path)
ready.write_text(str(path))
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if mode == "close" and held is not None and Path(str(ready) + ".close").exists():
        rw.close()
        held = None
        Path(str(ready) + ".closed").write_text("closed")
    time.sleep(0.02)
sys.exit(3)
