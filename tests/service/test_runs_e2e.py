"""End to end: real TensorBoard writers that finish, crash, hang or vanish, and what alertd says of each run.

The writers are this test's children, and it reaps them only at the end: gone, they are zombies whose exit
status /proc still shows, the evidence alertd reads of how each ended. One more writer is reaped at once:
nothing then says how it ended, and alertd says so (`unknown`), never "finished"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from service_helpers import Alertd, wait_for
from test_service_e2e import bodies_for

from alertd.testing.receiver import Receiver

WRITER = r"""
import os, signal, sys, time
from alertd.testing.tbwriter import ScalarWriter
from alertd.runs.writers import hold
logdir, how = sys.argv[1], sys.argv[2]
w = ScalarWriter(logdir)
w.flush()
held = hold(w.path)  # torch's writer holds no file open; this one does, as TensorFlow's and tensorboardX's do
for step in range(5):
    w.add_scalar("train/loss", 2.0 - step / 10, step)
    w.flush()
    time.sleep(0.1)
time.sleep(2)  # let alertd see it alive, holding its file
if how in ("finish", "crash", "reaped"):
    w.close()
    os.close(held)
    time.sleep(4)  # alertd sees it alive, its file closed (it looks every 2 s)
    sys.exit(1 if how == "crash" else 0)
if how in ("vanish", "killed"):
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
  - {{name: run_ended_unknown, metric: run.end, labels_match: {{reason: unknown}}, condition: "> 0"}}
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
        for how in ("finish", "crash", "hang", "vanish", "killed", "reaped"):
            writers[how] = subprocess.Popen([sys.executable, "-c", WRITER, str(logdir / how), how], env=env)
        reapers = [threading.Thread(target=writers[how].wait) for how in ("vanish", "reaped")]  # no zombie to read
        for reaper in reapers:
            reaper.start()
        wait_for(lambda: "finish" in fired(receiver, "run_finished"), "run_finished", 40, alertd)
        wait_for(lambda: "crash" in fired(receiver, "run_crashed"), "run_crashed (exit 1)", 40, alertd)
        wait_for(lambda: "vanish" in fired(receiver, "run_crashed"), "run_crashed (lost)", 40, alertd)
        wait_for(lambda: "killed" in fired(receiver, "run_crashed"), "run_crashed (killed)", 40, alertd)
        wait_for(lambda: "reaped" in fired(receiver, "run_ended_unknown"), "run_ended_unknown", 40, alertd)
        wait_for(lambda: "hang" in fired(receiver, "run_stalled"), "run_stalled", 40, alertd)
        assert fired(receiver, "run_finished")["finish"]["exit_code"] == "0"
        crash = fired(receiver, "run_crashed")["crash"]
        assert (crash["reason"], crash["exit_code"]) == ("crashed", "1")
        assert fired(receiver, "run_crashed")["vanish"]["reason"] == "lost"  # reaped: nothing says how
        killed = fired(receiver, "run_crashed")["killed"]
        assert (killed["reason"], killed["exit_code"]) == ("killed", "-9")  # its zombie's status says it
        assert set(fired(receiver, "run_stalled")) == {"hang"}  # a run that ended never stalls, zombie or not
        assert set(fired(receiver, "run_finished")) == {"finish"}  # said on evidence only
        assert set(fired(receiver, "run_ended_unknown")) == {"reaped"}
        assert writers["finish"].wait(10) == 0 and writers["crash"].wait(10) == 1
        for reaper in reapers:
            reaper.join(10)
        assert alertd.stop() == 0
    finally:
        for proc in writers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        alertd.stop(signal.SIGKILL)
        receiver.stop()
