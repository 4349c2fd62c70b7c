"""Helpers of the integration tests: start a real training script, read its samples file, wait on it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIMEOUT = 120.0
"""Seconds any one wait may take: a training script's imports alone take ~10 s on a loaded 2-core machine."""


@dataclass
class Child:
    """A training script running in a subprocess, its output going to `OUTDIR/child.log`."""

    proc: subprocess.Popen[bytes]
    outdir: Path

    @property
    def log(self) -> str:
        """What the script printed so far (stdout and stderr)."""
        return (self.outdir / "child.log").read_text(errors="replace")

    def samples(self, phase: str) -> list[dict[str, Any]]:
        """The samples the phase's callback wrote so far."""
        return read_samples(self.outdir / phase / "alertd-samples.jsonl")

    def wait_until(self, what: str, ready: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        """Poll `ready()` until it is truthy (and return it); fail, with the script's output, if the script exits
        first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            result = ready()
            if result:
                return result
            if self.proc.poll() is not None:
                raise AssertionError(f"the script exited ({self.proc.returncode}) before {what}:\n{self.log[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout} s:\n{self.log[-4000:]}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        """The script's exit status, once it has exited."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the script still runs after {timeout} s:\n{self.log[-4000:]}") from None

    def interrupt(self) -> None:
        """Send SIGINT, as alertd's `kill` notifier does first."""
        self.proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        """End the script if it still runs (test clean-up)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def start(script: str, outdir: Path, mode: str) -> Child:
    """Start `python tests/integrations/<script> OUTDIR MODE` with a clean alertd environment."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALERTD_")}
    env |= {"TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}
    with open(outdir / "child.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / script), str(outdir), mode],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=outdir,
            preexec_fn=_default_sigint,
        )
    return Child(proc, outdir)


def _default_sigint() -> None:
    """In the child, before exec: SIGINT at its default disposition (a shell's background job inherits it ignored,
    and Python then leaves it ignored), so that the script's Python makes it KeyboardInterrupt as usual."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a samples file, as JSON objects; [] while there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


def number(value: Any) -> float:
    """A sample's value as a float ("NaN", "+Inf", "-Inf" included)."""
    if isinstance(value, str):
        return {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf}[value.lower()]
    return float(value)


def series(samples: list[dict[str, Any]], metric: str) -> dict[int, float]:
    """{step: value} of one metric."""
    return {s["step"]: number(s["value"]) for s in samples if s["metric"] == metric}


def markers(samples: list[dict[str, Any]]) -> list[tuple[str, float, dict[str, str]]]:
    """The run markers in the order written: (metric, value, labels beyond run/host/pid)."""
    common = {"run", "host", "pid"}
    return [
        (s["metric"], number(s["value"]), {k: v for k, v in s["labels"].items() if k not in common})
        for s in samples
        if s["metric"].startswith("run.")
    ]


def last_step(samples: list[dict[str, Any]], metric: str = "train/loss") -> int:
    """The highest step of `metric` written so far (-1 if none)."""
    return max(series(samples, metric), default=-1)


def dry_run(samples_file: Path) -> list[dict[str, Any]]:
    """alertd's own `dry-run` of the default rules over a samples file: its transitions."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "alertd",
            "dry-run",
            "--rules",
            str(REPO / "rules" / "default.yaml"),
            "--source",
            f"samples:{samples_file}",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@dataclass
class StopResult:
    """What driving a `stop` script (phases abort, stopfile, sigint) showed."""

    alive_after_first_sigint: bool
    """The abort phase: the script still ran 0.5 s after the first SIGINT (it only noted the request)."""
    requested_after: dict[str, int]
    """For stopfile and sigint: the last `train/loss` step written when the stop was requested."""
    exit_code: int
    exit_seconds: float
    """From the SIGINT of the sigint phase to the script's exit."""


def write_stop_file(path: Path, rule: str, summary: str) -> None:
    """Create a stop file as alertd's `stop_file` notifier does: a JSON body, written whole, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"notifier": "stop", "rule": rule, "state": "firing", "summary": summary}) + "\n")
    os.replace(tmp, path)


def drive_stop(child: Child) -> StopResult:
    """Drive a script started in mode `stop` through its three phases; return what was seen."""

    def ended(phase: str) -> bool:
        return any(m[0] == "run.finished" for m in markers(child.samples(phase)))

    def past_step_3(phase: str) -> int:
        return last_step(child.samples(phase)) >= 3 and last_step(child.samples(phase))

    # abort: two SIGINTs during one long step.
    child.wait_until("the long step", (child.outdir / "abort" / "in_long_step").exists)
    child.interrupt()
    time.sleep(0.5)
    alive = child.proc.poll() is None and not ended("abort")
    child.interrupt()
    child.wait_until("the end of phase abort", lambda: ended("abort"))

    # stopfile: the request is made once step 3 is written.
    requested = {"stopfile": child.wait_until("step 3 of phase stopfile", lambda: past_step_3("stopfile"))}
    write_stop_file(child.outdir / "stopfile" / "ALERTD_STOP", "loss_not_finite", "train/loss is NaN (a test)")
    child.wait_until("the end of phase stopfile", lambda: ended("stopfile"))

    # sigint: as alertd's kill notifier does first.
    requested["sigint"] = child.wait_until("step 3 of phase sigint", lambda: past_step_3("sigint"))
    t0 = time.monotonic()
    child.interrupt()
    code = child.wait_exit()
    return StopResult(alive, requested, code, time.monotonic() - t0)
