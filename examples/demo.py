"""`make demo`: a small simulated training run goes NaN and alertd, on the default rules, says so.

Everything is real: the training loop writes TensorBoard event files with tensorboard's own writer,
alertd runs as its own process on rules/default.yaml, and its `console` notifier prints the alert.

alertd runs in a fresh temporary directory of its own (logdir, text logs, state), so nothing of the directory
`make demo` is started from (an old `./logs/*.log` with a NaN, an old state) can fire. The delay is measured
on one clock (monotonic), from the moment the NaN was written to the alert for this run's NaN.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from alertd.testing.tbwriter import ScalarWriter

ROOT = Path(__file__).resolve().parent.parent


RUN = "gpt-small"


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="alertd-demo-"))
    logdir = work / "runs"
    (work / "logs").mkdir()
    env = {
        **os.environ,
        "ALERTD_LOGDIR": str(logdir),
        "ALERTD_TEXTLOG": str(work / "logs" / "*.log"),
        "ALERTD_STATE_DIR": str(work / "state"),
    }
    cmd = [sys.executable, "-m", "alertd", "--rules", str(ROOT / "rules/default.yaml"), "--log-format", "text"]
    print(f"$ cd {work} && ALERTD_LOGDIR={logdir} alertd --rules rules/default.yaml", flush=True)
    alertd = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = threading.Event()
    nan_written: list[float] = []  # the monotonic time the NaN was written, once it was

    def relay() -> None:
        assert alertd.stdout is not None
        for line in alertd.stdout:
            print(f"  [alertd] {line.rstrip()}", flush=True)
            ours = f"run={RUN}" in line or f"in run {RUN}" in line
            if "notify receiver=console status=firing" in line and "loss_not_finite" in line and ours:
                if not nan_written:
                    print("\n>>> an alert before the NaN was written: not this run's NaN\n", flush=True)
                    continue
                delay = time.monotonic() - nan_written[0]
                print(f"\n>>> alerted {delay:.1f} s after the NaN was written\n", flush=True)
                seen.set()

    threading.Thread(target=relay, daemon=True).start()
    time.sleep(1.5)
    writer = ScalarWriter(logdir / RUN)
    print("training: logging train/loss to", logdir / RUN, flush=True)
    for step in range(0, 200, 10):
        loss = 3.0 * math.exp(-step / 150)
        writer.add_scalar("train/loss", loss, step)
        writer.flush()
        print(f"training: step {step:3d} loss {loss:.3f}", flush=True)
        time.sleep(0.2)
    nan_written.append(time.monotonic())  # before the write: no alert can come before this instant
    writer.add_scalar("train/loss", math.nan, 200)
    writer.flush()
    print("training: step 200 loss nan   <- the loss diverged", flush=True)
    ok = seen.wait(15)
    alertd.terminate()
    alertd.wait(10)
    writer.close()
    if not ok:
        print("demo FAILED: no alert within 15 s", flush=True)
        return 1
    print(f"demo done (files in {work})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
