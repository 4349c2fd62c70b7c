"""How the tests' torchrun children end their Gloo process group: no rank closes its connections while another is
still inside a collective.

`dist.barrier()` before `destroy_process_group()` does not ensure it: a rank that has passed the barrier may
close its connections while a slower rank is still completing it, and Gloo may then fail the slower rank's
barrier with "Connection closed by peer" (PyTorch issue #61670). The likely cause of a CI failure in
test_exec_torchrun.py: a rank's Python traceback after every rank had recorded its stop, the job "crashed"; not
reproduced here. Here each rank counts itself out in torchrun's
own store (the agent's TCPStore, outside every worker: MASTER_ADDR/MASTER_PORT, as torchrun documents) and waits
for every rank's count before it closes anything: by then no rank has a Gloo operation in flight.

A child imports it with `sys.path.insert(0, <tests>)`: it runs as a script, its own folder first on the path."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any


def leave(dist: Any) -> None:
    """Wait until every rank of the job is here, then destroy the process group."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # the store would live in rank 0, which may go
        raise RuntimeError("ddp_leave.leave needs torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True)")
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=60)
    )
    key = f"tests/ddp_leave/{os.environ['TORCHELASTIC_RUN_ID']}/{os.environ['TORCHELASTIC_RESTART_COUNT']}"
    world = dist.get_world_size()
    store.add(key, 1)
    deadline = time.monotonic() + 60
    while store.add(key, 0) < world:
        if time.monotonic() > deadline:
            raise TimeoutError(f"ddp_leave: only {store.add(key, 0)} of {world} ranks arrived in 60 s")
        time.sleep(0.005)
    dist.destroy_process_group()
