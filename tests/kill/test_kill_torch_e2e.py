"""End to end, issue 27 item 7: a plain torch trainer (`SummaryWriter`, nothing else) stopped from a sidecar.

torch's `SummaryWriter` opens and closes its event file at each flush, so no process is seen holding it
(but for the instants of a flush); a separate `alertd` service watching the logdir verifies the trainer
by ownership (its uid owns the file, and it started before the file was created) and stops it with
SIGINT on a NaN loss. The report, as the webhook receives it, says how the writer was verified.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from service_helpers import Alertd, wait_for

from alertd.runs.writers import BIRTH_TIME, NAME_TIME
from alertd.testing.receiver import Receiver, free_port

TRAINER = r"""
import math, signal, sys, time
from pathlib import Path
from torch.utils.tensorboard import SummaryWriter
work = Path(sys.argv[1])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
writer = SummaryWriter(str(work / "runs" / "exp1"))  # flushes every 120 s, as torch does by default
for step in range(1200):
    writer.add_scalar("train/loss", math.nan if step == 20 else 2.0 - step / 1000, step)
    if step in (10, 20):
        writer.flush()  # the file is open only while this writes
    if stop:
        (work / "checkpoint.pt").write_text(f"step {step}")
        writer.close()
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""

RULES = """
sources: [{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
  stop: {{type: kill, target: writer, signals: [SIGINT, SIGTERM, SIGKILL], grace: 20s}}
route:
  receivers: [hook]
  group_wait: 0s
  routes: [{{match: {{rule: loss_not_finite}}, receivers: [hook, stop]}}]
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


def test_a_torch_summarywriter_trainer_is_stopped_by_a_sidecar(tmp_path: Path) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=tmp_path / "runs", url=receiver.url))
    port = free_port()
    alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{port}")
    try:
        alertd.wait_log("alertd started")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path)], env=env)
        assert trainer.wait(90) == 0  # it saved and left on SIGINT; exit 3 would mean no signal came
        assert (tmp_path / "checkpoint.pt").read_text().startswith("step ")

        def report() -> list[str]:
            with receiver.recorder.lock:
                bodies = list(receiver.recorder.bodies)
            return [
                a["annotations"]["summary"] for b in bodies for a in b["alerts"] if a["labels"].get("action") == "kill"
            ]

        (summary,) = wait_for(report, "the kill report at the webhook", 40, alertd)
        (event_file,) = (tmp_path / "runs" / "exp1").glob(f"events.out.tfevents.*.{trainer.pid}.*")
        assert "sent SIGINT at" in summary and f"to pid {trainer.pid}" in summary and "exited" in summary
        assert "SIGTERM" not in summary and "SIGKILL" not in summary
        # By ownership: no process holds the file between flushes. (A check that happens to fall within one
        # of the two flushes' open/write/close sees it held: the report then says "by holds".)
        owner = f"writer verified by owner: uid {os.getuid()} owns {event_file}, created at "
        (run,) = httpx.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=10).json()
        assert run["writer"]["pid"] == trainer.pid and run["writer"]["verified"]
        assert run["writer"]["verifiedBy"] == ("owner" if owner in summary else "holds")
        if owner in summary:
            assert summary.endswith(
                (f"({BIRTH_TIME}) after the process started", f"({NAME_TIME}) after the process started")
            )
            assert f"pid {trainer.pid} verified as the writer of {event_file} (owns it" in alertd.logs()
        else:
            assert summary.endswith(f"; writer verified by holds: it held {event_file} open for writing"), summary
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
