"""`alertd exec` as a supervisor: Slurm's SIGUSR1, its own death, an output flood, a grandchild holding the output.
Real alertd processes, real children, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from alertd.service.child import fd_actions
from alertd.service.childtee import LIMIT, TEE, read_frames

RULES = """
notifiers: {console: {type: log}}
rules: [{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}]
"""
USR1_CHILD = str(Path(__file__).resolve().parent / "usr1_child.py")


def exec_cmd(tmp_path: Path, *child: str) -> list[str]:
    (tmp_path / "rules.yaml").write_text(RULES)
    rules, state = str(tmp_path / "rules.yaml"), str(tmp_path / "state")
    return [sys.executable, "-m", "alertd", "exec", "--rules", rules, "--state-dir", state, "--", *child]


def wait_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.02)
    return path.read_text()


def test_slurm_s_usr1_to_every_process_reaches_the_child_once(tmp_path: Path) -> None:
    """`scancel --signal=USR1 --full` signals every process of the job, alertd exec too, from slurmstepd (an
    ancestor of both): alertd stays, and does not send the child a second one."""
    out = tmp_path / "usr1"
    proc = subprocess.Popen(exec_cmd(tmp_path, sys.executable, USR1_CHILD, str(out)), stdout=subprocess.PIPE)
    child = int(wait_file(Path(f"{out}.pid")))
    time.sleep(0.5)  # alertd's signal thread is waiting (the child is running)
    os.kill(proc.pid, signal.SIGUSR1)  # this test is alertd's parent: its ancestor, as slurmstepd is
    os.kill(child, signal.SIGUSR1)
    assert proc.wait(60) == 0
    assert out.read_text() == "1"
    assert proc.stdout is not None
    with proc.stdout:  # closed once read
        assert proc.stdout.read().endswith(b"saved a checkpoint\n")


def test_a_usr1_to_alertd_alone_is_forwarded(tmp_path: Path) -> None:
    out = tmp_path / "usr1"
    proc = subprocess.Popen(exec_cmd(tmp_path, sys.executable, USR1_CHILD, str(out)), stdout=subprocess.DEVNULL)
    wait_file(Path(f"{out}.pid"))
    time.sleep(0.5)
    subprocess.run(["kill", "-USR1", str(proc.pid)], check=True)  # from a process that is no ancestor
    assert proc.wait(60) == 0
    assert out.read_text() == "1"


SIGINT_CHILD = r"""
import os, signal, sys, time
out = sys.argv[1]
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
open(out + ".pid", "w").write(str(os.getpid()))
while not stop:
    print("training", flush=True)
    time.sleep(0.02)
for i in range(50):  # the checkpoint takes a while and prints as it goes
    print(f"saving {i}", flush=True)
    time.sleep(0.01)
open(out, "w").write("checkpoint")
print("saved", flush=True)
"""


def test_a_sigkilled_alertd_leaves_the_child_the_polite_stop_and_its_output(tmp_path: Path) -> None:
    """SIGKILL of alertd exec: the child gets SIGINT (its parent-death signal), saves while printing, and
    its output still reaches the terminal (no SIGPIPE): the copy outlives alertd."""
    out = tmp_path / "ckpt"
    proc = subprocess.Popen(exec_cmd(tmp_path, sys.executable, "-c", SIGINT_CHILD, str(out)), stdout=subprocess.PIPE)
    child = int(wait_file(Path(f"{out}.pid")))
    time.sleep(0.5)
    proc.kill()
    proc.wait(10)
    assert proc.stdout is not None
    with proc.stdout:  # closed once read
        printed = proc.stdout.read()  # to the end: the copy closes it when the child is done
    assert out.read_text() == "checkpoint"
    assert printed.endswith(b"saving 49\nsaved\n"), printed[-200:]
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists():
        assert time.monotonic() < deadline, "the child still runs"
        time.sleep(0.05)


def test_an_output_flood_is_copied_whole_and_a_nan_at_its_end_is_seen(tmp_path: Path) -> None:
    lines = 300_000
    code = f"import sys\nfor i in range({lines}):\n    print(f'line {{i}}')\nprint('step=7 loss=nan', flush=True)\n"
    done = subprocess.run(exec_cmd(tmp_path, sys.executable, "-c", code), capture_output=True, timeout=120)
    expected = "".join(f"line {i}\n" for i in range(lines)).encode() + b"step=7 loss=nan\n"
    assert done.returncode == 0
    assert done.stdout == expected
    assert b"FIRING loss_not_finite" in done.stderr


def test_a_grandchild_holding_the_output_does_not_keep_alertd(tmp_path: Path) -> None:
    """The child starts a background `sleep` that inherits its output, and exits: alertd exec exits with it
    (the grandchild's output, if any, is still copied after alertd has gone)."""
    marker = tmp_path / "grandchild.pid"
    code = f"sleep 30 & echo $! > {marker}; echo started"
    with open(tmp_path / "out", "wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(exec_cmd(tmp_path, "sh", "-c", code), stdout=out)
        status = proc.wait(60)
    took = time.monotonic() - started
    try:
        assert status == 0 and (tmp_path / "out").read_bytes() == b"started\n"
        assert took < 15, took  # not the 30 s the grandchild holds the output (nor 20 s of waiting for it)
    finally:
        os.kill(int(marker.read_text()), signal.SIGKILL)


def test_the_copy_keeps_nan_lines_when_the_parsing_falls_behind(tmp_path: Path) -> None:
    """The copy process alone: 3x its limit printed while nothing reads the feed; everything reaches the
    output, the feed drops the oldest but keeps the lines naming a NaN, and says how much it dropped."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    feed_r, feed_w = os.pipe()
    notes_r, notes_w = os.pipe()
    sink = open(tmp_path / "copied", "wb")  # noqa: SIM115
    pairs = [(out_r, 0), (sink.fileno(), 1), (sink.fileno(), 2), (err_r, 3), (feed_w, 4), (notes_w, 6)]
    actions = fd_actions(pairs)
    pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", TEE], os.environ, file_actions=actions)
    for fd in (out_r, err_r, feed_w, notes_w):
        os.close(fd)
    sink.close()
    os.close(err_w)
    chunk = b"x" * 99 + b"\n"
    total = 0
    with os.fdopen(out_w, "wb") as w:
        while total < 3 * LIMIT:
            w.write(chunk * 1000)
            total += len(chunk) * 1000
            if total == len(chunk) * 1000 * 5:
                w.write(b"step=3 loss=nan\n")
                total += 16
    framed = bytearray()
    while data := os.read(feed_r, 1 << 20):
        framed += data
    os.close(feed_r)
    fed = b"".join(chunk for stream, chunk in read_frames(framed) if stream == 1)
    assert not framed  # whole frames only
    with os.fdopen(notes_r, "rb") as f:
        notes = f.read().split(b"\n")
    os.waitpid(pid, 0)
    assert (tmp_path / "copied").stat().st_size == total
    assert b"step=3 loss=nan\n" in fed and len(fed) < total
    dropped = [n for n in notes if n.startswith(b"dropped stdout ")]
    assert dropped and int(dropped[-1].split()[2]) == total - len(fed)
