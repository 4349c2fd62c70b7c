"""target: child (alertd exec's trainer) acts only on data from the child or its own descendants: real
processes, the real /proc. An alert restored from an earlier child (its `pid` label names a process that is
not this child's) is refused, never signalled to the new child."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from kill_helpers import PYTHON, Spawner, firing, notification, proc_state, wait_for

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier
from alertd.runs.procfs import Procfs

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()


async def stop_child(child: subprocess.Popen[bytes], labels: dict[str, str]) -> KillNotifier:
    info = Procfs().read(child.pid)
    assert info is not None
    cfg = KillConfig.model_validate({"type": "kill", "target": "child", "signals": ["SIGINT"], "grace": 1})
    notifier = KillNotifier("stop", cfg, child=lambda: (child.pid, info.start_ticks))
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()
    return notifier


async def test_the_child_s_own_data_stops_it(spawner: Spawner) -> None:
    child = spawner.popen([PYTHON, "-c", "import time; time.sleep(30)"])
    wait_for(lambda: proc_state(child.pid) == "S", "the child to start")
    notifier = await stop_child(child, {"source": "exec", "run": "t", "host": HOST, "pid": str(child.pid)})
    assert notifier.history[0].refused is None and child.wait(5) == -2


async def test_a_rank_under_the_child_names_it(spawner: Spawner, tmp_path: Path) -> None:
    # torchrun's way: the child launches the process that writes the data.
    marker = tmp_path / "rank.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(30)\n"
    )
    child = spawner.popen([PYTHON, "-c", code])
    wait_for(lambda: marker.exists() and marker.read_text(), "the rank to start")
    rank = int(marker.read_text())
    notifier = await stop_child(child, {"source": "exec", "run": "t", "pid": str(rank)})
    assert notifier.history[0].refused is None and child.wait(5) == -2
    with contextlib.suppress(ProcessLookupError):
        os.kill(rank, signal.SIGKILL)  # the rank, orphaned by its launcher's end


async def test_data_of_another_process_is_refused(spawner: Spawner) -> None:
    child = spawner.popen([PYTHON, "-c", "import time; time.sleep(30)"])
    earlier = spawner.popen([PYTHON, "-c", "import time; time.sleep(30)"])  # an earlier child's pid, reused
    wait_for(lambda: proc_state(child.pid) == "S", "the child to start")
    for named in (str(earlier.pid), "99999999", "not-a-pid"):
        notifier = await stop_child(child, {"source": "exec", "run": "t", "host": HOST, "pid": named})
        assert notifier.history[0].refused == (
            f"the data comes from pid {named}, which is neither the child (pid {child.pid}) nor one of its "
            "descendants: an earlier run's alert is not acted on"
        )
    assert child.poll() is None and earlier.poll() is None


async def test_data_without_a_pid_or_from_another_host_stops_the_child(spawner: Spawner) -> None:
    for labels in ({"source": "gpu", "gpu": "0"}, {"source": "prom", "host": "other-node", "pid": "4242"}):
        child = spawner.popen([PYTHON, "-c", "import time; time.sleep(30)"])
        wait_for(lambda c=child: proc_state(c.pid) == "S", "the child to start")
        notifier = await stop_child(child, labels)
        assert notifier.history[0].refused is None and child.wait(5) == -2
