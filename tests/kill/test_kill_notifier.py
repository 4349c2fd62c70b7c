"""KillNotifier against real child processes: the trainer path, escalation, once-per-firing, dry run."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import time

import pytest
from kill_helpers import (
    PYTHON,
    Spawner,
    firing,
    notification,
    own_pid_alive,
    signals_received,
    spawn_with_pid,
    tb_source,
    wait_for,
)

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier, KillReport
from alertd.errors import NotifyError
from alertd.model import TransitionKind
from alertd.runs.writers import WriterRegistry

pytestmark = pytest.mark.anyio


def kill_cfg(**kw: object) -> KillConfig:
    """A kill config with short graces (tests only)."""
    return KillConfig.model_validate({"type": "kill", "grace": 0.3, **kw})


async def test_trainer_saves_checkpoint_on_sigint_and_nothing_more_is_sent(spawner: Spawner) -> None:
    """The verified writer of a real event file gets SIGINT, checkpoints, exits 0; no SIGTERM/SIGKILL."""
    proc, work = spawner.script("trainer_script.py")
    source = tb_source(work / "logs")
    nans: list[tuple[tuple[str, str], ...]] = []
    wait_for(lambda: nans.extend(s.series.labels for s in source.read_new() if math.isnan(s.value)) or nans, "a NaN")
    labels = dict(nans[0])
    assert labels == {"source": "tb", "run": ".", "host": socket.gethostname(), "pid": str(proc.pid)}
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    writer = registry.writer("tb", ".")
    assert writer is not None and writer.pid == proc.pid and writer.host == socket.gethostname()
    reports: list[KillReport] = []

    async def collect(r: KillReport) -> None:
        reports.append(r)

    notifier = KillNotifier("stop", kill_cfg(grace=10), report=collect, writers=registry.writer)
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()

    (report,) = reports
    assert notifier.history == [report]
    assert [s.name for s in report.signals] == ["SIGINT"]
    assert report.exited and report.exit_status == 0
    assert report.refused is None and not report.dry_run
    assert report.pid == proc.pid and report.rule == "loss_not_finite"
    assert report.program.endswith(" trainer_script.py") and report.cmdline == ""
    assert json.loads((work / "checkpoint.json").read_text())["signal"] == "SIGINT"
    assert proc.wait(timeout=5) == 0  # the zombie was left for its owner, with the same status
    assert "sent SIGINT" in report.summary() and "exited with status 0" in report.summary()


async def test_escalates_to_sigkill_after_the_grace_periods(spawner: Spawner) -> None:
    """A process that ignores SIGINT and SIGTERM gets each, `grace` apart, then SIGKILL."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, grace=0.4))
    await notifier.send(notification(firing({"run": "r"})))
    assert notifier.history == []  # send() returned while the escalation goes on in the background
    wait_for(lambda: "SIGINT" in signals_received(work), "SIGINT to arrive")  # sent before send() returned
    await notifier.wait_idle()

    (report,) = notifier.history
    assert [s.name for s in report.signals] == ["SIGINT", "SIGTERM", "SIGKILL"]
    gaps = [b.time - a.time for a, b in zip(report.signals, report.signals[1:], strict=False)]
    assert all(g >= 0.35 for g in gaps), gaps
    assert report.exited and report.exit_status == -signal.SIGKILL
    assert signals_received(work) == ["SIGINT", "SIGTERM"]
    assert proc.wait(timeout=5) == -signal.SIGKILL


async def test_reports_a_process_still_running_after_the_last_signal(spawner: Spawner) -> None:
    """With a signal list that never kills, the report says the process is still running."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, signals=["SIGTERM"], grace=0.2))
    await notifier.send(notification(firing({})))
    await notifier.wait_idle()
    (report,) = notifier.history
    assert not report.exited and report.exit_status is None
    assert "still running" in report.note
    assert signals_received(work) == ["SIGTERM"] and proc.poll() is None


async def test_acts_once_per_firing_and_never_on_resolution(spawner: Spawner) -> None:
    """Repeats and re-sends of one firing do nothing; resolved does nothing; a new firing acts again."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, signals=["SIGINT"], grace=0.05))
    alert = firing({"run": "r"}, active_at=time.time() - 5)
    await notifier.send(notification(alert))
    await notifier.send(notification(alert))  # a repeat of the same notification
    await notifier.send(notification(firing({"run": "r"}, active_at=alert.active_at)))  # re-sent later
    await notifier.send(notification(firing({"run": "r"}, state=TransitionKind.RESOLVED)))
    await notifier.wait_idle()
    time.sleep(0.2)
    assert signals_received(work) == ["SIGINT"]
    assert len(notifier.history) == 1

    await notifier.send(notification(firing({"run": "r"}, active_at=time.time())))  # fires anew
    await notifier.wait_idle()
    wait_for(lambda: len(signals_received(work)) == 2, "the second SIGINT")
    assert len(notifier.history) == 2


async def test_resolution_alone_sends_nothing(spawner: Spawner) -> None:
    """A resolved alert for a writer never signals it."""
    proc, work = spawner.script("stubborn_script.py")
    labels = {"host": socket.gethostname(), "pid": str(proc.pid)}
    notifier = KillNotifier("stop", kill_cfg())
    await notifier.send(notification(firing(labels, state=TransitionKind.RESOLVED, active_at=time.time() - 9)))
    time.sleep(0.2)
    assert notifier.history == [] and signals_received(work) == [] and proc.poll() is None


async def test_dry_run_reports_and_sends_nothing(spawner: Spawner) -> None:
    """dry_run: the report says what would be done; the process gets no signal."""
    proc, work = spawner.script("stubborn_script.py")
    reports: list[KillReport] = []

    async def collect(r: KillReport) -> None:
        reports.append(r)

    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, dry_run=True), report=collect)
    await notifier.send(notification(firing({"run": "r"}, active_at=time.time())))
    await notifier.wait_idle()
    time.sleep(0.2)
    (report,) = reports
    assert report.dry_run and report.signals == () and report.refused is None and report.pid == proc.pid
    assert "would send SIGINT, then SIGTERM, then SIGKILL" in report.note
    assert "DRY RUN" in report.summary() and report.cmdline == ""  # nothing signalled: no command line
    assert signals_received(work) == [] and proc.poll() is None


async def test_short_host_name_does_not_match_the_long_one(spawner: Spawner) -> None:
    """`node7` in the labels does not name this machine when it is `node7.cluster.example`: exact names only.

    (It used to match on the short name; a host label from anyone's file name must match exactly.)
    """
    proc, work = spawner.script("stubborn_script.py")
    registry = WriterRegistry(hostname="node7.cluster.example")
    notifier = KillNotifier("stop", kill_cfg(dry_run=True), hostname="node7.cluster.example", writers=registry.writer)
    await notifier.send(notification(firing({"source": "tb", "run": ".", "host": "node7", "pid": str(proc.pid)})))
    (report,) = notifier.history
    assert report.refused == "the data comes from host 'node7', not this machine ('node7.cluster.example')"
    assert signals_received(work) == [] and proc.poll() is None


async def test_cmdline_all_stops_every_match(spawner: Spawner) -> None:
    """cmdline with all: true signals each matching process and reports each."""
    token = f"alertd-kill-all-{os.getpid()}"
    a, _ = spawner.script("stubborn_script.py", token)
    b, _ = spawner.script("stubborn_script.py", token)
    notifier = KillNotifier("stop", kill_cfg(target="cmdline", cmdline=token, all=True, grace=0.1))
    await notifier.send(notification(firing({})))
    await notifier.wait_idle()
    assert sorted(r.pid for r in notifier.history if r.pid is not None) == sorted([a.pid, b.pid])
    assert all(r.exited and r.exit_status == -signal.SIGKILL for r in notifier.history)


async def test_pid_reused_during_escalation_is_never_signalled(spawner: Spawner) -> None:
    """The target dies and its pid goes to a new process before the next signal: nothing more is sent.

    What is exercised: the notifier has sent SIGINT to a stubborn child A; the test then kills and
    reaps A and, through /proc/sys/kernel/ns_last_pid, starts B with A's pid (a real pid reuse). The
    escalation's next look at the pid sees B's different start time: it reports A as gone, and B gets
    no signal (it would die of SIGTERM or SIGKILL). Where the kernel won't let the test choose a pid,
    B is any new process and only the "A is gone" half is shown; test_procs.py covers the check made
    right before each signal.
    """
    a, _ = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=a.pid, grace=1.0))
    await notifier.send(notification(firing({})))
    a.kill()
    a.wait()
    b = spawn_with_pid(spawner, a.pid, [PYTHON, "-c", "import time; time.sleep(30)"])
    await notifier.wait_idle()
    (report,) = notifier.history
    assert [s.name for s in report.signals] == ["SIGINT"]
    assert report.exited and report.exit_status is None  # reaped by its owner: status unknown here
    if b is not None:
        assert b.pid == a.pid and own_pid_alive(b.pid) and b.poll() is None


async def test_aclose_stops_the_escalation(spawner: Spawner) -> None:
    """aclose() sends nothing more, reports the cancelled escalation, and refuses later sends."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, grace=30))
    await notifier.send(notification(firing({})))
    await notifier.aclose()
    (report,) = notifier.history
    assert [s.name for s in report.signals] == ["SIGINT"] and not report.exited
    assert "cancelled at shutdown" in report.note
    wait_for(lambda: signals_received(work) == ["SIGINT"], "SIGINT")
    assert proc.poll() is None
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(firing({}, active_at=time.time() + 1)))
    assert not err.value.recoverable


async def test_failing_report_callback_does_not_lose_the_record(spawner: Spawner) -> None:
    """A report callback that raises is logged; the report stays in history and send() succeeds."""
    proc, _ = spawner.script("stubborn_script.py")

    async def broken(r: KillReport) -> None:
        raise RuntimeError("the other notifiers are down")

    notifier = KillNotifier("stop", kill_cfg(target="pid", pid=proc.pid, dry_run=True), report=broken)
    await notifier.send(notification(firing({})))
    assert len(notifier.history) == 1 and notifier.history[0].dry_run
