"""`alertd dry-run`'s progress bar, through a real subprocess whose stderr is a pseudo-terminal."""

from __future__ import annotations

import fcntl
import json
import math
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2

from alertd.progress import ERASE
from alertd.sources.tensorboard.tfrecord import frame
from alertd.testing.tbwriter import ScalarWriter, scalar_record

T0 = 1780012800.0


def dry_run(*args: str, tty: bool, both: bool = False) -> tuple[int, str, str]:
    """(exit status, stdout, what stderr got) of `python -m alertd dry-run ARGS`; stderr a pseudo-terminal
    (100 columns) when `tty`, else a pipe. stdout is a pipe, or with `both` the same terminal."""
    argv = [sys.executable, "-m", "alertd", "dry-run", *args]
    env = {**os.environ, "TERM": "xterm"}
    if not tty:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    stdout = slave if both else subprocess.PIPE
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=slave, env=env) as proc:
        os.close(slave)
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else b""))
        reader.start()
        got = b""
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            got += data
        os.close(master)
        reader.join(120)
        try:
            status = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()  # the `with` waits for the child: a hung one fails the test, not the whole run
            raise
    return status, out[0].decode(), got.decode()


def frames(err: str) -> list[str]:
    return [f.removesuffix(ERASE) for f in err.replace("\r\n", "\n").split("\r") if f.removesuffix(ERASE)]


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Two runs' event files written by tensorboard's own writer; run b's loss goes NaN at step 1500."""
    for run in ("a", "b"):
        writer = ScalarWriter(tmp_path / "runs" / run)
        for step in range(3000):
            loss = math.nan if run == "b" and step == 1500 else 1.0 / (step + 1)
            writer.add_scalar("train/loss", loss, step, wall_time=T0 + step)
        writer.close()
    (tmp_path / "train.log").write_text("".join(f"step={s} loss={1 / (s + 1):.4f}\n" for s in range(2000)))
    return tmp_path


def test_a_terminal_sees_the_bar_and_stdout_is_what_a_pipe_gets(logdir: Path) -> None:
    args = ("--rules", "rules/default.yaml", "--source", f"tensorboard:{logdir / 'runs'}")
    args += ("--source", f"textlog:{logdir / 'train.log'}", "--format", "json")
    status, out, err = dry_run(*args, tty=True)
    assert status == 0, err
    piped_status, piped_out, piped_err = dry_run(*args, tty=False)
    assert piped_status == 0 and out == piped_out
    assert any(json.loads(x)["rule"] == "loss_not_finite" for x in out.splitlines())

    shown = frames(err)
    tb = [f for f in shown if f.startswith("tb (tensorboard): ")]
    assert tb[-1].startswith("tb (tensorboard): 2/2 files, ") and "(100%)" in tb[-1] and tb[-1].endswith("ETA 0:00")
    logs = [f for f in shown if f.startswith("logs (textlog): ")]
    assert logs[-1].startswith("logs (textlog): 1/1 files, ") and "(100%)" in logs[-1]
    evaluating = [f for f in shown if f.startswith("evaluating: ")]
    total = 2 * 3000 + 2000
    assert evaluating[-1].startswith(f"evaluating: {total:,}/{total:,} samples (100%), ")
    assert all(len(f) < 100 for f in shown)  # never wraps on the 100-column terminal
    assert err.endswith("\r" + ERASE)  # erased at the end: the terminal keeps only the results
    assert "\r" not in piped_err and ERASE not in piped_err


def test_results_on_the_same_terminal_are_printed_where_the_bar_was_erased(logdir: Path) -> None:
    args = ("--rules", "rules/default.yaml", "--source", f"tensorboard:{logdir / 'runs'}", "--format", "json")
    status, _, screen = dry_run(*args, tty=True, both=True)
    assert status == 0, screen
    _, piped_out, _ = dry_run(*args, tty=False)
    first = piped_out.splitlines()[0]
    assert f"\r{ERASE}{first}\r\n" in screen  # the bar erased first: the result is a line of its own
    assert all(line in screen for line in piped_out.splitlines())


def test_quiet_draws_nothing_on_the_terminal(logdir: Path) -> None:
    args = ("--rules", "rules/default.yaml", "--source", f"tensorboard:{logdir / 'runs'}")
    status, out, err = dry_run(*args, "--quiet", tty=True)
    assert status == 0
    assert err == ""
    assert "FIRING   loss_not_finite" in out


def test_warnings_are_printed_above_the_bar(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    good = {"metric": "loss", "labels": {"run": "a"}, "time": T0, "step": 1, "value": "NaN"}
    f.write_text("{oops\n" + json.dumps(good) + "\n")
    status, out, err = dry_run("--rules", "rules/default.yaml", "--source", f"samples:{f}", tty=True)
    assert status == 0
    assert f"\r{ERASE}warning: {f}:1: skipped: not JSON" in err
    assert "FIRING   loss_not_finite" in out


def test_an_event_file_longer_than_one_poll_reads_is_replayed_to_its_end(tmp_path: Path) -> None:
    """The TensorBoard source reads 256 MiB of a file per poll; a dry-run polls until it has all of it."""
    big = frame(event_pb2.Event(wall_time=T0, step=0, file_version="x" * (30 << 20)).SerializeToString())
    path = tmp_path / f"events.out.tfevents.{int(T0)}.host.1.0"
    with path.open("wb") as f:
        f.write(scalar_record("train/loss", 1.0, 0, T0))
        for _ in range(10):  # 300 MiB of records that are not scalars
            f.write(big)
        f.write(scalar_record("train/loss", math.nan, 5, T0 + 5))
    status, out, err = dry_run("--rules", "rules/default.yaml", "--source", f"tensorboard:{tmp_path}", tty=False)
    assert status == 0, err
    assert "FIRING   loss_not_finite          train/loss=NaN step=5" in out
