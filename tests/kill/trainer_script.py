"""A trainer-like child for the kill tests.

It writes real TensorBoard event files with tensorboard's own EventFileWriter (so the file name carries
this host and this pid) and keeps its event file open with `alertd.runs.writers.hold()`, as alertd's training
callback does (without TensorFlow, EventFileWriter holds the file only while it writes, so alertd could
not verify the writer otherwise). On SIGINT it saves a "checkpoint" file and exits 0, as a careful
training loop does. It writes READY once its handler is installed and the first event is on disk.

Usage: trainer_script.py LOGDIR CHECKPOINT READY
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.runs.writers import hold

logdir, checkpoint, ready = sys.argv[1:4]
writer = EventFileWriter(logdir)
step = 0


def log_loss(value: float) -> None:
    """Append one `loss` scalar at the current step and flush it."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=value)])
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.flush()


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """Save the checkpoint and leave cleanly."""
    writer.close()
    Path(checkpoint).write_text(json.dumps({"step": step, "signal": signal.Signals(signum).name}))
    sys.exit(0)


signal.signal(signal.SIGINT, on_sigint)
log_loss(1.0)
name = writer._general_file_writer.filename
held = hold(name.decode() if isinstance(name, bytes) else name)
Path(ready).write_text("ready")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    step += 1
    log_loss(math.nan if step > 3 else 1.0 / step)
    time.sleep(0.05)
sys.exit(3)
