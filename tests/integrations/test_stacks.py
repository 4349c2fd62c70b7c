"""The `stacks` action on real processes: a torchrun job (Gloo, CPU) whose rank 2 straggles before an all_reduce
is captured by py-spy (rank 2 in its sleep, ranks 0 and 1 in all_reduce; the callbacks' faulthandler hook is the
fallback, tested on a single process) and
goes on to finish; a plain process without the callbacks is captured by py-spy, or the report says why not."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from integ_helpers import HERE

from alertd.actions.config import StacksConfig
from alertd.actions.stacks import ProcStack, StacksNotifier, StacksReport, _faulthandler_frames, _py_spy_frames
from alertd.integrations.stacks import stacks_name
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.runs.procfs import Procfs
from alertd.runs.tracker import action_entry

TORCHRUN = Path(sys.executable).with_name("torchrun")
SLEEP = 8.0


def _line_of(path: Path, line: str) -> int:
    """The 1-based number of the one line of `path` that equals `line`."""
    found = [n for n, text in enumerate(path.read_text().splitlines(), 1) if text == line]
    assert len(found) == 1, (path, line, found)
    return found[0]


def _alert(labels: dict[str, str], rule: str = "run_stalled") -> Transition:
    now = time.time()
    return Transition(rule, TransitionKind.FIRING, now, 3, math.nan, make_labels(labels), "warning", (), now)


def _notification(*alerts: Transition) -> Notification:
    return Notification("stacks", "g", (), "firing", alerts, "g:firing", time.time())


def _child_of(proc: subprocess.Popen[bytes]) -> tuple[int, int]:
    info = Procfs().read(proc.pid)
    assert info is not None
    return proc.pid, info.start_ticks


async def _capture(cfg: StacksConfig, child: tuple[int, int], *alerts: Transition) -> list[StacksReport]:
    notifier = StacksNotifier("stacks", cfg, child=lambda: child)
    await notifier.send(_notification(*alerts))
    await notifier.wait_idle()
    await notifier.aclose()
    return list(notifier.history)


def _wait(cond: object, what: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if proc.poll() is not None:
            raise AssertionError(f"waiting for {what}: the job exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_straggling_rank_and_the_ranks_waiting_for_it_in_all_reduce(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ALERTD_SAMPLES_FILE")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node=3", str(HERE / "stacks_loop_run.py")]
    cmd += [str(tmp_path), "6", "3", str(SLEEP)]
    log = (tmp_path / "job.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: all((tmp_path / f"AT.rank{r}").exists() for r in range(3)), "every rank at step 3", proc)
        time.sleep(0.5)  # ranks 0 and 1 are inside all_reduce, rank 2 in its sleep
        labels = {"source": "samples", "run": "hang"}
        cfg = StacksConfig(type="stacks", target="child")
        t0 = time.monotonic()
        first, second = _alert(labels), _alert(labels, "rank_stalled")
        reports = asyncio.run(_capture(cfg, _child_of(proc), first, second))
        took = time.monotonic() - t0
        assert proc.poll() is None, "the capture must not end the job"
        busy = [r for r in reports if r.refused is not None]
        (report,) = [r for r in reports if r.refused is None]
        assert len(busy) == 1 and "already under way" in str(busy[0].refused)  # one capture per run at a time
        print(report.summary())
        print(report.processes[0].dump)
        by_rank = {p.rank: p for p in report.processes}
        assert sorted(by_rank) == ["0", "1", "2"], report.summary()
        assert all(p.method == "py-spy" for p in report.processes), report.summary()  # root: py-spy attaches
        assert "sleep" in by_rank["2"].frames[0], by_rank["2"].frames
        assert "all_reduce" in " ".join(by_rank["0"].frames) and "all_reduce" in " ".join(by_rank["1"].frames)
        assert took < 5.0
        summary = report.summary()
        assert len(summary) <= cfg.summary_chars and "rank 2 (pid" in summary and "straggler_sleep" in summary
        entry = action_entry(report, time.time())  # what lands on the run (run page, /api/v1/runs)
        assert entry["action"] == "stacks" and len(entry["processes"]) == 3  # type: ignore[arg-type]
        sleeping = _line_of(HERE / "stacks_loop_run.py", "    time.sleep(seconds)")
        assert f"straggler_sleep (stacks_loop_run.py:{sleeping})" in str(entry["processes"])  # the whole dump
        for r in range(3):  # py-spy took them: no rank was sent the hook's signal
            assert (tmp_path / stacks_name(str(r))).stat().st_size == 0
        # the job goes on and finishes: nothing stopped or killed
        assert proc.wait(timeout=60) == 0, (tmp_path / "job.log").read_text()[-3000:]
        assert all((tmp_path / f"DONE.rank{r}").exists() for r in range(3))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


PLAIN = """
import sys, time
from dataclasses import replace
from pathlib import Path
def plain_sleep():
    Path(sys.argv[1]).write_text("ready")
    time.sleep(60)
plain_sleep()
"""


def test_a_plain_process_is_captured_by_py_spy_or_the_report_says_why(tmp_path: Path) -> None:
    ready = tmp_path / "READY"
    proc = subprocess.Popen([sys.executable, "-c", PLAIN, str(ready)])
    try:
        _wait(ready.exists, "the plain process", proc, timeout=20)
        cfg = StacksConfig(type="stacks", target="child", py_spy_timeout=20)
        (report,) = asyncio.run(_capture(cfg, _child_of(proc), _alert({"source": "s", "run": "plain"})))
        print(report.summary())
        assert report.refused is None
        (p,) = report.processes
        assert p.pid == proc.pid and p.rank is None
        if p.method == "py-spy":
            assert p.frames and "plain_sleep" in p.frames[0], p.dump
        else:
            assert p.method == "none" and ("py-spy can't attach" in p.error or "not installed" in p.error), p.error
        assert proc.poll() is None  # still running: py-spy only looked
    finally:
        proc.kill()
        proc.wait()


def test_no_child_is_refused() -> None:
    cfg = StacksConfig(type="stacks", target="child")
    notifier = StacksNotifier("stacks", cfg, child=lambda: None)

    async def go() -> None:
        await notifier.send(_notification(_alert({"source": "s", "run": "r"})))
        await notifier.wait_idle()

    asyncio.run(go())
    (report,) = notifier.history
    assert report.refused is not None and "no child process" in report.refused
    assert "REFUSED" in report.summary()


def test_frames_are_parsed_from_both_dumps() -> None:
    fh = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n'
        "\n"
        "Current thread 0x00007f0000000002 (most recent call first):\n"
        '  File "/x/distributed_c10d.py", line 2806 in all_reduce\n'
        '  File "/x/c10d_logger.py", line 81 in wrapper\n'
        '  File "/x/train.py", line 30 in main\n'
        '  File "/x/train.py", line 40 in <module>\n'
    )
    assert _faulthandler_frames(fh) == (
        "all_reduce (distributed_c10d.py:2806)",
        "wrapper (c10d_logger.py:81)",
        "main (train.py:30)",
    )
    spy = (
        "Process 12: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
        'Thread 12 (idle): "MainThread"\n'
        "    plain_sleep (<string>:6)\n"
        "    <module> (<string>:7)\n"
    )
    assert _py_spy_frames(spy) == ("plain_sleep (<string>:6)", "<module> (<string>:7)")


WATCHDOG = (
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600000 milliseconds before "
    "timing out."
)


def test_the_report_carries_the_collective_lines_after_the_stacks_size_capped() -> None:
    frames = ("all_reduce (distributed_c10d.py:2806)", "main (train.py:30)")
    procs = tuple(ProcStack(100 + r, str(r), "faulthandler", "dump", frames=frames) for r in range(4))
    lines = tuple(WATCHDOG.replace("SeqNum=42", f"SeqNum={i}") for i in range(5))
    report = StacksReport("dump", "fp", "run_stalled", "child", "vm", run="r", pid=99, processes=procs)
    assert "collective" not in report.summary() and "collective_lines" not in report.as_json()  # not taken
    with_lines = replace(report, collective_lines=lines)
    summary = with_lines.summary()
    stacks, tail = summary.split("; collective log lines (last 3 of 5): ")
    assert stacks == report.summary()
    shown = tail.split(" | ")
    assert [s[:110] for s in shown] == [line[:110] for line in lines[2:]]  # the newest 3, oldest first
    assert all(len(s) == 200 and s.endswith("…") for s in shown)
    assert with_lines.as_json()["collective_lines"] == list(lines)  # all of them, whole, on the run
    small = replace(with_lines, summary_chars=800)  # the stacks are cut first: the lines keep their place
    assert len(small.summary()) <= 800 and "collective log lines (last 3 of 5)" in small.summary()
    refused = replace(with_lines, processes=(), refused="no child process")
    assert "collective" not in refused.summary()


def test_the_notifier_takes_the_child_s_collective_lines_under_target_child_only(tmp_path: Path) -> None:
    ready = tmp_path / "READY"
    proc = subprocess.Popen([sys.executable, "-c", PLAIN, str(ready)])
    try:
        _wait(ready.exists, "the plain process", proc, timeout=20)
        alert = _alert({"source": "s", "run": "plain"})

        async def capture(target: str) -> StacksReport:
            cfg = StacksConfig(type="stacks", target=target, py_spy=None)  # type: ignore[arg-type]
            child = _child_of(proc)
            notifier = StacksNotifier("dump", cfg, child=lambda: child, collective_lines=lambda: [WATCHDOG])
            await notifier.send(_notification(alert))
            await notifier.wait_idle()
            await notifier.aclose()
            (report,) = notifier.history
            return report

        report = asyncio.run(capture("child"))
        assert report.refused is None and report.collective_lines == (WATCHDOG,)
        assert WATCHDOG[:150] in report.summary() and report.as_json()["collective_lines"] == [WATCHDOG]
        writer = asyncio.run(capture("writer"))  # outside exec: nothing changes
        assert writer.collective_lines is None and "collective" not in writer.summary()
    finally:
        proc.kill()
        proc.wait()
