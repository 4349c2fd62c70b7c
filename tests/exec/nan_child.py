"""A trainer for `alertd exec` tests: prints `step=N loss=X` lines, NaN from step NAN_AT, and records what
stopped it.

    python nan_child.py RESULT.json [--ignore-sigint] [--stop-file]

From step NAN_AT it prints `loss=nan` and waits (up to 60 s) for a stop: a SIGINT (its handler records the
time), or with --stop-file the file $ALERTD_STOP_FILE names (alertd's callbacks' polite stop). After the first
request it waits one more second, to catch a second signal, then writes RESULT.json: the time.time() of the
NaN line, of each SIGINT, and of the stop file seen, and exits 0. With --ignore-sigint SIGINT is ignored (a
trainer that will not stop by itself).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

NAN_AT = 5

result: dict[str, object] = {"sigints": [], "stop_file": None, "pid": os.getpid()}


def on_sigint(signum: int, frame: object) -> None:
    result["sigints"].append(time.time())  # type: ignore[attr-defined]


def main() -> None:
    out = sys.argv[1]
    if "--ignore-sigint" in sys.argv:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, on_sigint)
    stop_file = os.environ.get("ALERTD_STOP_FILE") if "--stop-file" in sys.argv else None
    for step in range(1, NAN_AT):
        print(f"step={step} loss={2.0 / step:.3f}", flush=True)
        time.sleep(0.05)
    result["nan_at"] = time.time()
    print(f"step={NAN_AT} loss=nan", flush=True)
    deadline = time.time() + 60
    asked = None
    while time.time() < deadline:
        if asked is None and result["sigints"]:
            asked = time.time()
        if asked is None and stop_file and os.path.exists(stop_file):
            result["stop_file"] = asked = time.time()
        if asked is not None and time.time() > asked + 1.0:
            break
        time.sleep(0.005)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
