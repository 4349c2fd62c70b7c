"""A FIFO named like an event file in a watched logdir freezes nothing: a real alertd keeps reading the
other files (a NaN is alerted), /healthz answers within a second, SIGTERM ends it within 10 s."""

from __future__ import annotations

import math
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from service_helpers import Alertd

from alertd.sources.config import SamplesConfig
from alertd.sources.fileopen import NotRegularFile
from alertd.sources.mlflow.filestore import read_meta
from alertd.sources.samples import SamplesSource, read_samples
from alertd.testing.receiver import free_port
from alertd.testing.tbwriter import ScalarWriter

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}]
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite}}
"""


def test_a_fifo_named_like_an_event_file_freezes_nothing(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    (logdir / "a").mkdir(parents=True)
    os.mkfifo(logdir / "a" / "events.out.tfevents.1780000000.host.1.0")
    rules, port = tmp_path / "rules.yaml", free_port()
    rules.write_text(RULES.format(logdir=logdir))
    alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{port}")
    try:
        alertd.wait_log("alertd started")
        time.sleep(1.0)  # several polls past the FIFO
        w = ScalarWriter(str(logdir / "b"))
        w.add_scalar("train/loss", 1.0, 1)
        w.add_scalar("train/loss", math.nan, 2)
        w.flush()
        alertd.wait_log('"state": "firing"', 15)
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
        assert time.monotonic() - started < 1.0
        stopping = time.monotonic()
        assert alertd.stop() == 0
        assert time.monotonic() - stopping < 10
        w.close()
    finally:
        alertd.stop(signal.SIGKILL)
    assert "a FIFO" in alertd.logs()


def test_the_samples_and_mlflow_file_readers_refuse_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "samples.jsonl"
    os.mkfifo(fifo)
    src = SamplesSource(SamplesConfig(name="s", type="samples", path=str(fifo)))
    with pytest.raises(NotRegularFile, match="is a FIFO, not a regular file"):
        src.read_new()
    with pytest.raises(NotRegularFile):
        list(read_samples(str(fifo)))
    with pytest.raises(NotRegularFile):
        read_meta(str(fifo))
