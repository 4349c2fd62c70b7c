"""The textlog source over real files: globs and runs, rotation, events, restarts, real trainers' output."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textlog_helpers import Closing, by_metric, source

from alertd.sources.textlog.source import SHAPES, UNMATCHED_AFTER, TextLogSource
from alertd.sources.textlog.stream import MAX_SERIES


def test_a_glob_finds_logs_as_they_appear_each_its_own_run(tmp_path: Path, closing: Closing[TextLogSource]) -> None:
    logs = tmp_path / "logs"
    (logs / "exp1").mkdir(parents=True)
    (logs / "exp1" / "train.log").write_text("step=1 loss=2.0\n")
    src = closing(source(f"{logs}/**/*.log"))
    first = src.read_new(100.0)
    assert [(s.series.label("run"), s.step, s.value, s.time) for s in first] == [("exp1/train.log", 1, 2.0, 100.0)]
    assert first[0].series.label("source") == "log"
    (logs / "exp2.log").write_text("step=5 loss=nan\n")
    (logs / "notes.txt").write_text("loss=1\n")
    second = src.read_new(101.0)
    assert [(s.series.label("run"), s.step) for s in second] == [("exp2.log", 5)]
    assert math.isnan(second[0].value)


def test_a_plain_file_path_that_appears_later(tmp_path: Path, closing: Closing[TextLogSource]) -> None:
    log = tmp_path / "train.log"
    src = closing(source(log))
    assert src.read_new(1.0) == []
    log.write_text("loss=1.5\n")
    assert [(s.series.label("run"), s.value) for s in src.read_new(2.0)] == [("train.log", 1.5)]


def test_a_log_rotated_by_rename_is_not_read_again_under_its_new_name(
    tmp_path: Path, closing: Closing[TextLogSource]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "train.log"
    log.write_text("step=1 loss=1\n")
    src = closing(source(f"{logs}/*"))  # also matches train.log.1 once it exists
    assert by_metric(src.read_new(1.0), "loss") == [(1, 1.0)]
    with open(log, "a") as f:
        f.write("step=2 loss=2\n")
    os.rename(log, logs / "train.log.1")
    log.write_text("step=3 loss=nan\n")
    got = src.read_new(2.0)
    assert [(s.series.label("run"), s.step) for s in got] == [("train.log", 2), ("train.log", 3)]
    with open(logs / "train.log.1", "a") as f:  # a writer that kept the old file open writes on
        f.write("step=4 loss=4\n")
    assert [(s.series.label("run"), s.step) for s in src.read_new(3.0)] == [("train.log.1", 4)]


def test_events_become_samples_and_a_fatal_one_ends_the_run_as_crashed(
    tmp_path: Path, closing: Closing[TextLogSource]
) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "step=7 loss=1.25\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
    )
    got = closing(source(log, events=[{"name": "diverged", "regex": "diverg"}])).read_new(5.0)
    assert [(s.series.metric, s.series.label("event"), s.step) for s in got] == [
        ("loss", None, 7),
        ("log.event", "traceback", 7),
        ("run.crashed", None, 7),
        ("run.finished", None, 7),
        ("log.event", "cuda_oom", 7),
        ("run.crashed", None, 7),
        ("run.finished", None, 7),
    ]


def test_a_restarted_source_neither_rereads_nor_restarts_its_counter(
    tmp_path: Path, closing: Closing[TextLogSource]
) -> None:
    log = tmp_path / "train.log"
    log.write_text("loss=1\nloss=2\n")
    src = closing(source(log))
    assert by_metric(src.read_new(1.0), "loss") == [(1, 1.0), (2, 2.0)]
    saved = src.cursor()
    with open(log, "a") as f:
        f.write("loss=3\n")
    again = closing(source(log))
    again.restore(saved)
    assert by_metric(again.read_new(2.0), "loss") == [(3, 3.0)]


def test_a_fifo_in_the_glob_is_refused_and_the_other_logs_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, closing: Closing[TextLogSource]
) -> None:
    os.mkfifo(tmp_path / "a.log")
    (tmp_path / "b.log").write_text("loss=nan\n")
    src = closing(source(f"{tmp_path}/*.log"))
    got = src.read_new(1.0)
    assert [s.series.label("run") for s in got] == ["b.log"]  # the glob lists regular files only


def test_a_log_printing_ever_new_keys_is_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, closing: Closing[TextLogSource]
) -> None:
    log = tmp_path / "noisy.log"
    log.write_text("".join(f"k{i}=1\n" for i in range(MAX_SERIES + 50)))
    got = closing(source(log)).read_new(1.0)
    assert len({s.series for s in got}) == MAX_SERIES
    assert "new ones are dropped" in caplog.text


def test_real_hf_trainer_output_shows_the_nan_grad_norm_and_the_filtered_loss(
    hf_log: Path, closing: Closing[TextLogSource]
) -> None:
    got = closing(source(hf_log)).read_new(1.0)
    grad = by_metric(got, "grad_norm")
    assert len(grad) == 20 and [s for s, _ in grad] == list(range(1, 21))
    assert all(math.isfinite(v) for _, v in grad[:11]) and all(math.isnan(v) for _, v in grad[11:])
    loss = by_metric(got, "loss")
    # HF's default logging_nan_inf_filter hides the NaN: the printed loss drops to exactly 0.
    assert all(v > 0 for _, v in loss[:11]) and all(v == 0.0 for _, v in loss[11:])
    assert len(by_metric(got, "train_runtime")) == 1  # the end-of-training summary


def test_real_lightning_progress_bar_gives_the_nan_train_loss(
    lightning_log: Path, closing: Closing[TextLogSource]
) -> None:
    got = closing(source(lightning_log)).read_new(1.0)
    values = [v for _, v in by_metric(got, "train_loss")]
    first_nan = next(i for i, v in enumerate(values) if math.isnan(v))
    assert first_nan >= 10 and all(math.isfinite(v) for v in values[:first_nan])
    assert "v_num" not in {s.series.metric for s in got}


def dry_run(rules: str, spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alertd", "dry-run", "--rules", rules, "--source", spec, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_shell_loop_s_train_log_fires_loss_not_finite_at_the_nan_s_step(tmp_path: Path) -> None:
    """The classic `watch_loss.sh`: tail train.log every 60 s, mail on nan. Same file, default rules."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"step={s} loss={3.0 - s / 1000:.4f}\n" for s in range(0, 500, 10)) + "step=500 loss=nan\n")
    res = dry_run("rules/default.yaml", f"textlog:{log}")
    assert res.returncode == 0, res.stderr
    fired = [json.loads(line) for line in res.stdout.splitlines()]
    nan = [t for t in fired if t["rule"] == "loss_not_finite"]
    assert [(t["state"], t["step"], t["value"], t["labels"]["run"]) for t in nan] == [
        ("firing", 500, "NaN", "train.log")
    ]
    assert nan[0]["annotations"]["summary"] == "loss is NaN at step 500 in train.log"


def test_dry_run_over_real_hf_output_fires_grad_norm_not_finite(hf_log: Path) -> None:
    res = dry_run("rules/default.yaml", f"textlog:{hf_log}")
    assert res.returncode == 0, res.stderr
    assert '"rule": "grad_norm_not_finite", "state": "firing", ' in res.stdout
    assert '"step": 12, "value": "NaN"' in res.stdout
    zeroed = [t for t in map(json.loads, res.stdout.splitlines()) if t["rule"] == "loss_zeroed"]
    assert [(t["state"], t["step"], t["value"]) for t in zeroed][:1] == [("firing", 12, 0.0)]


def test_a_log_that_matches_nothing_is_warned_about_once_and_noted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, closing: Closing[TextLogSource]
) -> None:
    prose = tmp_path / "prose.log"
    prose.write_text("".join(f"loss is {2.0 / i:.2f} now\n" for i in range(1, 6)))
    (tmp_path / "train.log").write_text("step 1 loss 2.31\nstep 2 loss 2.2\n")
    src = closing(source(f"{tmp_path}/*.log"))
    got = src.read_new(1.0)
    assert by_metric(got, "loss") == [(1, 2.31), (2, 2.2)]  # the `name value` lines are read
    assert src.note == f"{prose}: 5 lines read, none matched ({SHAPES})"
    assert "none matched" not in caplog.text  # not yet: 5 lines may be a header
    with prose.open("a") as f:
        f.write("".join(f"loss is {i} now\n" for i in range(UNMATCHED_AFTER)))
    src.read_new(2.0)
    src.read_new(3.0)
    warned = [r for r in caplog.records if "none matched" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in warned] == [
        ("WARNING", f"log file {prose}: {5 + UNMATCHED_AFTER} lines read, none matched ({SHAPES})")
    ]
    with prose.open("a") as f:
        f.write("loss=1.5\n")
    src.read_new(4.0)
    assert src.note is None  # it matched something after all


def test_dry_run_says_when_a_log_matched_nothing(tmp_path: Path) -> None:
    (tmp_path / "prose.log").write_text("training started\nloss is 2.3\n")
    (tmp_path / "train.log").write_text("step 1 loss 2.3\nstep 2 loss nan\n")
    res = dry_run("rules/default.yaml", f"textlog:{tmp_path}/*.log")
    assert res.returncode == 0, res.stderr
    fired = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(t["rule"], t["step"], t["labels"]["run"]) for t in fired] == [("loss_not_finite", 2, "train.log")]
    assert f"note: source 'logs': {tmp_path}/prose.log: 2 lines read, none matched (" in res.stderr
    assert "train.log" not in res.stderr
