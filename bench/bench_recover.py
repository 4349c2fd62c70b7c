"""Benchmark of `recover` under `alertd exec`: from a NaN to the first step of the resumed run, and the work lost.

Run as `python bench/bench_recover.py`. Each trial runs the real Hugging Face Trainer of
`examples/recover/hf_train.py` (one-layer GPT-2, 60 steps of at least 50 ms, `save_steps=10,
save_total_limit=1`, the loss of update 40 NaN) under `alertd exec` with a `recover` notifier fed by the
callbacks' samples file. From the samples file and alertd's log:

- NaN -> first resumed step: from the NaN loss row (the trainer's own clock) to the first step boundary of the
  resumed attempt (its first `train/step_skipped` or `train/loss` row), split into alertd's part (the NaN to the
  new child's start: seen, planned, the child stopped and reaped) and the framework's own start-up (the new
  child's start to its first step: Python, torch and transformers imported, the checkpoint loaded);
- steps lost: the updates the first attempt trained after the checkpoint it was rolled back to (thrown away),
  against the checkpoint interval.

The anchor, in the same run: a bare start of the same trainer (no alertd), from the process start to its first
step: the floor of any restart.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

TRIALS = int(os.environ.get("BENCH_RECOVER_TRIALS", "5"))
CHILD = Path(__file__).resolve().parents[1] / "examples" / "recover" / "hf_train.py"
ARGS = ["--nan-at", "40", "--pace", "0.05"]
INTERVAL = 10
RULES = """
sources:
  - {{name: train, type: samples, path: "{samples}", interval: 0.2s}}
notifiers:
  back: {{type: recover, lr_scale: 0.5, backoff: 0s}}
route: {{receivers: [back], group_wait: 0s}}
rules:
  - name: loss_not_finite
    metric: [train/loss, train/grad_norm]
    labels_match: {{source: train}}
    condition: nonfinite
    severity: critical
"""


def rows(out: Path) -> list[dict[str, object]]:
    text = (out / "alertd-samples.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def log_times(stderr: str, text: str) -> list[float]:
    """Epoch seconds of alertd's JSON log lines whose message holds `text`."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("{") and text in line:
            stamp = json.loads(line)["time"].replace("Z", "+00:00")
            out.append(datetime.fromisoformat(stamp).timestamp())
    return out


def trial(tmp: Path, i: int) -> tuple[float, float, float, float, int]:
    """(NaN -> first resumed step, NaN -> the stop honoured, the stopped child's exit, the framework's start-up,
    updates lost)."""
    out = tmp / f"out{i}"
    rules = tmp / f"rules{i}.yaml"
    rules.write_text(RULES.format(samples=out / "alertd-samples.jsonl"))
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp / f"s{i}")]
    done = subprocess.run(
        [*cmd, "--", sys.executable, str(CHILD), str(out), *ARGS], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"bench_recover: trial {i} failed:\n{done.stderr[-3000:]}")
    samples = rows(out)
    nan = next(r for r in samples if r["metric"] == "train/loss" and r["value"] == "NaN")
    resumed = next(r for r in samples if r["metric"] == "alertd.recovery")
    after = [r for r in samples if float(r["time"]) >= float(resumed["time"])]  # type: ignore[arg-type]
    first = next(r for r in after if r["metric"] in ("train/step_skipped", "train/loss"))
    started = log_times(done.stderr, "alertd exec: started")[1]
    exited = log_times(done.stderr, "exited with status")[0]
    stop = next(r for r in samples if r["metric"] == "run.stopped")
    lost = int(stop["step"]) - int(resumed["step"])  # type: ignore[call-overload]
    t_nan, t_stop, t_first = (float(r["time"]) for r in (nan, stop, first))  # type: ignore[arg-type]
    return t_first - t_nan, t_stop - t_nan, exited - t_stop, t_first - started, lost


def bare(tmp: Path, i: int) -> float:
    """Seconds from a bare start of the trainer to its first step."""
    out = tmp / f"bare{i}"
    t0 = time.time()
    child = [sys.executable, str(CHILD), str(out), *ARGS]
    proc = subprocess.Popen(child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            path = out / "alertd-samples.jsonl"
            if path.exists() and any(r["metric"] == "train/loss" for r in rows(out)):
                break
            time.sleep(0.01)
        first = next(float(r["time"]) for r in rows(out) if r["metric"] == "train/loss")  # type: ignore[arg-type]
    finally:
        proc.kill()
        proc.wait()
    return first - t0


def main() -> None:
    """Print the benchmark lines."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results = [trial(tmp, i) for i in range(TRIALS)]
        anchor = statistics.median(bare(tmp, i) for i in range(TRIALS))
    total, stop, exit_, startup = (statistics.median(r[k] for r in results) for k in range(4))
    lost = [r[4] for r in results]
    print(
        f"recover (HF Trainer, {TRIALS} runs): NaN -> first step of the resumed run median {total:.2f} s "
        f"(seen, planned and the stop honoured at the next step {stop:.2f} s; the stopped trainer's exit "
        f"{exit_:.2f} s; the new trainer's own start-up to its first step {startup:.2f} s, {startup / total:.0%}); "
        f"a bare start of the same trainer to its first step {anchor:.2f} s (recovery / bare start "
        f"{total / anchor:.2f}x)"
    )
    print(
        f"recover: updates lost per recovery median {statistics.median(lost):g} (min {min(lost)}, max {max(lost)}) "
        f"with a checkpoint every {INTERVAL} updates ({statistics.median(lost) / INTERVAL:.2f}x the interval; "
        f"the NaN 10 updates after the checkpoint, the rest until the stop)"
    )


if __name__ == "__main__":
    main()
