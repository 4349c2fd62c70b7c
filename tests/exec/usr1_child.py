"""A trainer for the SIGUSR1 tests: counts the SIGUSR1s it gets (Slurm's checkpoint request), then "saves".

python usr1_child.py OUT     # OUT.pid: its pid once it runs; OUT: how many SIGUSR1s it got
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
got: list[float] = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(time.time()))
Path(f"{out}.pid").write_text(str(os.getpid()))
deadline = time.time() + 60
while not got and time.time() < deadline:
    print("step=1 loss=1.0", flush=True)
    time.sleep(0.05)
time.sleep(1.0)  # a second USR1 would come now
print("saved a checkpoint", flush=True)
out.write_text(str(len(got)))
