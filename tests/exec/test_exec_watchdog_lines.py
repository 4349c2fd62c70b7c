"""A hang's NCCL/Gloo watchdog and flight-recorder lines in the `stacks` report: `ChildRun` keeps the last output
lines that look like a collective's watchdog, its flight recorder or a process group's timeout (a bounded ring,
plain substring tests), and the `stacks` action's report under alertd exec carries them (its summary: the last 3,
cut; its JSON: all). The lines below are PyTorch's own messages (ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp, Gloo's
transport, c10d's socket, NCCL's own WARN) as a rank prints them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from alertd.service.child import COLLECTIVE_CHARS, COLLECTIVE_LINES, ChildRun, CollectiveLines, collective_line
from alertd.testing.receiver import Receiver

WATCHDOG = (
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600000 milliseconds before "
    "timing out."
)
DETECTED = (
    "[rank0]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 0] Exception (either an error or timeout) detected "
    "by watchdog at work: 42, last enqueued NCCL work: 42, last completed NCCL work: 41."
)
COLLECTIVE = [
    WATCHDOG,
    DETECTED,
    "[PG 0 (default_pg) Rank 0] Timeout at NCCL work: 42, last enqueued NCCL work: 42, last completed NCCL work: 41.",
    "[rank1]:[F ProcessGroupNCCL.cpp:1306] [PG 0 (default_pg) Rank 1] Heartbeat monitor timed out! Process will be "
    "terminated after dumping debug info. workMetaList_.size()=1",
    "[rank0]:[E ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with "
    "exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE)",
    "Finished writing Flight Recorder debug info to /tmp/nccl_trace_rank_0",
    "[rank0]:[W ProcessGroupNCCL.cpp:1181] Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated in favor of "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING (function operator())",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
    "operation to complete",
    "RuntimeError: Rank 1 failed to pass monitoredBarrier in 1000 ms",
    "[W socket.cpp:697] [c10d] The client socket has timed out after 900s while trying to connect to (127.0.0.1, "
    "29500).",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "node1:1234:1290 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43215> failed",
    "node1:1234:1290 [0] NCCL INFO Call to connect returned Connection timed out, retrying",
    "E0101 12:00:00.000000 1234 ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with timeout",
]
OTHER = [
    "step=10 loss=2.31",
    "{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}",
    "Epoch 1: 100%|██████████| 10/10 [00:01<00:00,  9.50it/s]",
    "NCCL version 2.21.5+cuda12.4",
    "node1:1234:1290 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "Timed out waiting for the web server",
    "Rank 0: saved checkpoint to /ckpt/step_100",
    "[PG] warming up",
]


def test_only_collective_lines_are_taken() -> None:
    assert [line for line in COLLECTIVE if not collective_line(line)] == []
    assert [line for line in OTHER if collective_line(line)] == []


def test_the_ring_is_bounded_keeps_the_newest_and_cuts_long_lines() -> None:
    ring = CollectiveLines()
    for i in range(3 * COLLECTIVE_LINES):
        ring.feed([*OTHER, WATCHDOG.replace("SeqNum=42", f"SeqNum={i}") + "\n"])
    lines = ring.lines()
    assert len(lines) == COLLECTIVE_LINES
    assert "SeqNum=100," in lines[0] and f"SeqNum={3 * COLLECTIVE_LINES - 1}," in lines[-1]  # oldest first
    assert not any(line.endswith("\n") for line in lines)
    ring.feed([DETECTED + " " + "x" * 5000])
    last = ring.lines()[-1]
    assert len(last) == COLLECTIVE_CHARS and last.endswith("…") and last.startswith(DETECTED)
    lines.clear()  # a copy: the ring is not changed through it
    assert len(ring.lines()) == COLLECTIVE_LINES


def test_matching_is_linear() -> None:
    ring = CollectiveLines()
    huge = "NCCL " + "a" * 1_000_000 + " timeout"
    plain = [f"step={i} loss=2.{i % 10} lr=1e-4 grad_norm=0.5" for i in range(100_000)]
    t0 = time.monotonic()
    ring.feed([huge, *plain])
    took = time.monotonic() - t0
    assert ring.lines() == [huge[: COLLECTIVE_CHARS - 1] + "…"]
    assert took < 2.0, took


def test_a_child_s_collective_lines_are_kept(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "for i in range(60):\n"
        f"    print('step=%d loss=1.5' % i); print({WATCHDOG!r}.replace('SeqNum=42', 'SeqNum=%d' % i))\n"
        f"print({DETECTED!r}, file=sys.stderr)\n"
    )
    with open(os.devnull, "wb") as null:
        child = ChildRun(
            [sys.executable, "-c", code],
            run="t",
            on_samples=lambda s: None,
            stdout_fd=null.fileno(),
            stderr_fd=null.fileno(),
        )
        child.start()
        assert child.wait() == 0
    lines = child.collective_lines()
    assert len(lines) == COLLECTIVE_LINES and lines[-1] == DETECTED, lines[-3:]
    assert "SeqNum=11," in lines[0] and "SeqNum=59," in lines[-2]


RULES = """
sources:
  - {{name: train, type: samples, path: "{samples}", interval: 0.2s}}
runs: {{stall_after: 2s}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
  dump: {{type: stacks, target: child, py_spy: null, wait: 0.5s}}
route:
  receivers: [hook]
  group_by: [rule, run]
  group_wait: 0s
  routes: [{{match: {{rule: run_stalled}}, receivers: [dump], continue: true}}, {{receivers: [hook]}}]
rules:
  - {{name: run_stalled, metric: run.stalled, labels_match: {{source: train}}, condition: "> 0", severity: critical}}
"""
HUNG = f"""
import json, sys, time
with open(sys.argv[1], "a") as f:
    for step in range(1, 4):
        f.write(json.dumps({{"metric": "train/loss", "labels": {{"run": "j"}}, "time": time.time(), "step": step,
                            "value": 2.0 / step}}) + "\\n")
        f.flush()
        time.sleep(0.1)
print({WATCHDOG!r})
print({DETECTED!r}, file=sys.stderr)
time.sleep(120)
"""
"""Its samples (a `samples` source) stop: the run stalls. (The watchdog line, a fatal `nccl_timeout` event, ends the
run of its own output as crashed: that one never stalls.)"""


def test_a_hung_child_s_watchdog_lines_reach_the_webhook_with_its_stacks(tmp_path: Path) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    samples = tmp_path / "alertd-samples.jsonl"
    rules.write_text(RULES.format(samples=samples, url=receiver.url))
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        [*cmd, "--run", "t", "--", sys.executable, "-c", HUNG, str(samples)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        summary: str | None = None
        deadline = time.monotonic() + 30
        while summary is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            with receiver.recorder.lock:
                bodies = list(receiver.recorder.bodies)
            for body in bodies:
                alerts: list[dict[str, dict[str, str]]] = body["alerts"]  # type: ignore[assignment]
                for alert in alerts:
                    if alert["labels"].get("action") == "stacks":
                        summary = alert["annotations"].get("summary", "")
        assert proc.poll() is None, "the hung child must still be running"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert summary is not None, err.decode()[-4000:]
        print(summary)
        assert "REFUSED" not in summary, summary
        assert "collective log lines (2):" in summary, summary
        assert WATCHDOG[:150] in summary and DETECTED[:150] in summary, summary
        assert summary.index("Watchdog caught") < summary.index("Exception (either an error")  # oldest first
        assert WATCHDOG.encode() in out and DETECTED.encode() in err  # passed through unchanged
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        receiver.stop()
