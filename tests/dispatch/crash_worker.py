"""A dispatcher process for the crash test: plan NaN alerts for COUNT runs, deliver until nothing is pending.

Usage: python crash_worker.py URL COUNT   (state directory from ALERTD_STATE_DIR)
It prints `planned N` once the plan is in the outbox, and `done` when every notification was delivered.
"""

from __future__ import annotations

import asyncio
import sys
import time

from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.outbox import Outbox, state_dir
from alertd.dispatch.pipeline import Backoff
from alertd.dispatch.routes import Route
from alertd.model import Alert, AlertState
from dispatch.helpers import FIRING, tr
from dispatch.receiver import HttpTestNotifier


async def main(url: str, count: int) -> None:
    """Run the dispatcher as alertd would after an evaluation that found `count` NaN losses."""
    now = time.time()
    fired = [tr("loss_not_finite", FIRING, now, run=f"run{i}", severity="critical") for i in range(count)]
    alerts = {
        t.fingerprint: Alert(t.rule, AlertState.FIRING, t.labels, t.severity, t.value, t.step, now, now, now)
        for t in fired
    }
    hook = HttpTestNotifier("hook", url)
    outbox = Outbox(state_dir("./.state"))
    d = Dispatcher(
        route=Route(receivers=("hook",)),
        outbox=outbox,
        notifiers={"hook": hook},
        backoff=Backoff(base=0.02, cap=0.1),
    )
    plan = d.submit(fired, alerts, now)
    print(f"planned {len(plan.notifications)}", flush=True)
    while outbox.rows("pending"):
        now = time.time()
        await d.deliver_due(now)
        nxt = outbox.next_due()
        if nxt is not None:
            await asyncio.sleep(min(max(nxt - time.time(), 0.005), 0.1))
    print("done", flush=True)
    await hook.aclose()
    outbox.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
