"""End to end: real TensorBoard writers that finish, hang or vanish, and what alertd says of each run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from service_helpers import Alertd, wait_for
from test_service_e2e import bodies_for

from alertd.testing.receiver import Receiver

WRITER = r"""
import os, signal, sys, time
from alertd.testing.tbwriter import ScalarWriter
from alertd.writers import hold
logdir, how = sys.argv[1], sys.argv[2]
w = ScalarWriter(logdir)
w.flush()
held = hold(w.path)  # torch's writer holds no file open; this one does, as TensorFlow's and tensorboardX's do
for step in range(5):
    w.add_scalar("train/loss", 2.0 - step / 10, step)
    w.flush()
    time.sleep(0.1)
time.sleep(2)  # let alertd see it alive, holding its file
if how == "finish":
    w.close()
    os.close(held)
    time.sleep(4)  # alertd sees it alive, its file closed (it looks every 2 s)
    sys.exit(0)
if how == "vanish":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(600)  # hang
"""

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s, group_interval: 1s}}
runs: {{stall_after: 12s}}
evaluation_interval: 0.5s
rules:
  - {{name: run_stalled, metric: run.stalled, condition: "> 0"}}
  - {{name: run_crashed, metric: run.end, labels_match: {{reason: "=~crashed|killed|lost"}}, condition: "> 0"}}
  - {{name: run_finished, metric: run.end, labels_match: {{reason: finished}}, condition: "> 0"}}
"""


def fired(receiver: Receiver, rule: str) -> dict[str, dict[str, str]]:
    return {b["alerts"][0]["labels"]["run"]: b["alerts"][0]["labels"] for b in bodies_for(receiver, rule, "firing")}


def test_finished_hung_and_vanished_writers(tmp_path: Path) -> None:
    receiver = Receiver()
    logdir = tmp_path / "runs"
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=logdir, url=receiver.url))
    alertd = Alertd(rules, tmp_path / "state")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = {}
    try:
        alertd.wait_log("alertd started")
        for how in ("finish", "hang", "vanish"):
            writers[how] = subprocess.Popen([sys.executable, "-c", WRITER, str(logdir / how), how], env=env)
        wait_for(lambda: "finish" in fired(receiver, "run_finished"), "run_finished", 40, alertd)
        wait_for(lambda: "vanish" in fired(receiver, "run_crashed"), "run_crashed (lost)", 40, alertd)
        wait_for(lambda: "hang" in fired(receiver, "run_stalled"), "run_stalled", 40, alertd)
        assert fired(receiver, "run_crashed")["vanish"]["reason"] == "lost"
        assert set(fired(receiver, "run_stalled")) == {"hang"}  # a run that ended never stalls
        assert set(fired(receiver, "run_finished")) == {"finish"}
        assert writers["finish"].wait(10) == 0
        assert alertd.stop() == 0
    finally:
        for proc in writers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        alertd.stop(signal.SIGKILL)
        receiver.stop()
