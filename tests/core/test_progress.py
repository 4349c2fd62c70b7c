"""alertd.progress: the line's text (time is an argument), the redraw rules, and what the file readers report."""

from __future__ import annotations

import asyncio
import io
import logging
import os
from pathlib import Path

import pytest
from core_helpers import Closing

from alertd import progress
from alertd.progress import ERASE, MessageHandler, Progress, Reading, eval_line, read_line
from alertd.sources.config import CsvConfig, TensorBoardConfig, TextLogConfig
from alertd.sources.csvfile import CsvSource
from alertd.sources.samples import read_samples
from alertd.sources.tensorboard.source import TensorBoardSource
from alertd.sources.textlog.source import TextLogSource
from alertd.testing.tbwriter import ScalarWriter

T0 = 1780012800.0

# the line


def test_a_read_with_a_known_total_shows_files_bytes_share_rate_and_eta() -> None:
    r = Reading("tb (tensorboard)", files=12, files_done=3, done=120_500_000, total=800_000_000)
    assert read_line(r, elapsed=2.5) == "tb (tensorboard): 3/12 files, 120.5/800.0 MB (15%), 48.2 MB/s, ETA 0:14"


def test_the_eta_is_hours_minutes_seconds_past_an_hour_and_unknown_before_any_byte() -> None:
    slow = Reading("tb", files=1, files_done=0, done=1_000_000, total=10_000_000_000)
    assert read_line(slow, elapsed=10.0) == "tb: 0/1 files, 0.0/10.0 GB (0%), 0.1 MB/s, ETA 27:46:30"
    none = Reading("tb", files=2, files_done=0, done=0, total=5_000)
    assert read_line(none, elapsed=0.0) == "tb: 0/2 files, 0.0/5.0 kB (0%), 0.0 MB/s, ETA ?"
    done = Reading("tb", files=2, files_done=2, done=5_000, total=5_000)
    assert read_line(done, elapsed=1.0) == "tb: 2/2 files, 5.0/5.0 kB (100%), 0.0 MB/s, ETA 0:00"


def test_without_a_total_only_what_was_read_and_the_rate() -> None:
    api = Reading("wb (wandb)", files=0, files_done=0, done=3_200_000, total=None, rows=1234)
    assert read_line(api, elapsed=2.0) == "wb (wandb): 1,234 rows, 3.2 MB, 1.6 MB/s"
    store = Reading("mlf (mlflow)", files=40, files_done=40, done=250_000, total=None)
    assert read_line(store, elapsed=0.5) == "mlf (mlflow): 40 files, 250.0 kB, 0.5 MB/s"


def test_the_evaluating_line() -> None:
    assert eval_line(1_200_000, 3_400_000, elapsed=4.8) == (
        "evaluating: 1,200,000/3,400,000 samples (35%), 250,000 samples/s, ETA 0:09"
    )
    assert eval_line(0, 0, elapsed=0.0) == "evaluating: 0/0 samples (100%), 0 samples/s, ETA 0:00"


def test_the_line_never_reaches_the_last_column_and_a_hostile_name_cannot_drive_the_terminal() -> None:
    r = Reading("\x1b]0;owned\x07tb\r\n", files=1, files_done=0, done=0, total=10)
    line = read_line(r, elapsed=1.0)
    assert line.startswith("?]0;owned?tb??: ")
    assert all(c.isprintable() for c in line)
    assert read_line(r, elapsed=1.0, width=20) == line[:19]


# the observer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def frames(text: str) -> list[str]:
    """The lines drawn, in order (each is `\\r` + line + erase-to-end)."""
    return [f.removesuffix(ERASE) for f in text.split("\r") if f.removesuffix(ERASE)]


def test_redrawn_at_most_ten_times_a_second_and_each_phase_ends_with_its_final_state() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(out, clock=clock, width=lambda: 200)
    bar.reading("tb", total_known=True)
    bar.sized("a", 4_000_000)
    for pos in range(100_000, 4_000_001, 100_000):  # 40 reads, 0.01 s apart: 0.4 s
        clock.now += 0.01
        bar.reached("a", pos)
    assert bar.frames == 5  # the first at once, then one per 0.1 s
    bar.finish_phase()
    assert frames(out.getvalue())[-1] == "tb: 1/1 files, 4.0/4.0 MB (100%), 10.0 MB/s, ETA 0:00"
    bar.evaluated(0, 1000)
    clock.now += 1.0
    bar.evaluated(1000, 1000)
    assert frames(out.getvalue())[-1] == "evaluating: 1,000/1,000 samples (100%), 1,000 samples/s, ETA 0:00"
    bar.close()
    assert out.getvalue().endswith("\r" + ERASE)


def test_a_message_is_printed_on_a_line_of_its_own_and_the_bar_comes_back() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(out, clock=clock, width=lambda: 200)
    bar.reading("logs", total_known=True)
    bar.sized("f", 100)
    handler = MessageHandler(bar)
    log = logging.getLogger("alertd.test.progress")
    log.addHandler(handler)
    try:
        log.warning("corrupt record in %s", "f")
    finally:
        log.removeHandler(handler)
    assert out.getvalue().endswith("\r" + ERASE + "corrupt record in f\n")
    clock.now += 0.2
    bar.reached("f", 50)
    assert out.getvalue().endswith("\rlogs: 0/1 files, 0.1/0.1 kB (50%), 0.0 MB/s, ETA 0:00" + ERASE)


def test_api_bytes_and_rows_make_the_total_unknown() -> None:
    bar = Progress(io.StringIO(), clock=Clock())
    bar.reading("wb (wandb)", total_known=False)
    bar.received(5000, 0)
    bar.received(0, 7)
    assert bar.snapshot() == Reading("wb (wandb)", files=0, files_done=0, done=5000, total=None, rows=7)


def test_no_bar_unless_stderr_is_a_terminal_that_can_redraw(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Progress.for_terminal(io.StringIO()) is None
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        assert Progress.for_terminal(pipe) is None
    os.close(r)
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setenv("TERM", "xterm")
        assert Progress.for_terminal(tty) is not None
        monkeypatch.setenv("TERM", "dumb")
        assert Progress.for_terminal(tty) is None
    os.close(master)


# what the readers report (in-process, real files)


def observed(read: object) -> Reading:
    bar = Progress(io.StringIO(), clock=Clock())
    bar.reading("x", total_known=True)
    with progress.observing(bar):
        assert callable(read)
        read()
    assert not progress.active()
    return bar.snapshot()


def test_the_tensorboard_reader_reports_every_file_up_front_and_each_byte_decoded(tmp_path: Path) -> None:
    sizes = 0
    for run in ("a", "b"):
        writer = ScalarWriter(tmp_path / run)
        for step in range(2000):
            writer.add_scalar("train/loss", 1.0 / (step + 1), step, wall_time=T0 + step)
        writer.close()
        sizes += os.path.getsize(writer.path)
    src = TensorBoardSource(TensorBoardConfig(name="tb", type="tensorboard", logdir=str(tmp_path)))
    got = observed(src.read_new)
    assert got == Reading("x", files=2, files_done=2, done=sizes, total=sizes)


def test_the_text_log_and_csv_readers_report_lines_turned_into_samples(
    tmp_path: Path, closing: Closing[TextLogSource | CsvSource]
) -> None:
    (tmp_path / "a.log").write_text("".join(f"step={s} loss={1 / (s + 1):.5f}\n" for s in range(20_000)))
    (tmp_path / "b.log").write_text("step=1 loss=0.5\nstep=2 loss=0.4")  # an unfinished last line: not read yet
    logs = closing(TextLogSource(TextLogConfig(name="logs", type="textlog", path=str(tmp_path / "*.log"))))
    got = observed(lambda: logs.read_new(T0))
    a, b = os.path.getsize(tmp_path / "a.log"), os.path.getsize(tmp_path / "b.log")
    assert got == Reading("x", files=2, files_done=1, done=a + len("step=1 loss=0.5\n"), total=a + b)

    (tmp_path / "m.csv").write_text("step,loss\n" + "".join(f"{s},{1 / (s + 1):.5f}\n" for s in range(20_000)))
    csv = closing(CsvSource(CsvConfig(name="csv", type="csv", path=str(tmp_path / "m.csv"))))
    size = os.path.getsize(tmp_path / "m.csv")
    assert observed(lambda: csv.read_new(T0)) == Reading("x", files=1, files_done=1, done=size, total=size)


def test_the_samples_reader_reports_as_it_goes(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = '{"metric": "loss", "time": 1780012800, "step": 1, "value": 0.5}\n'
    path.write_text(line * 10_000)
    seen: list[int] = []

    class Positions(Progress):
        def reached(self, path: str, pos: int) -> None:
            seen.append(pos)
            super().reached(path, pos)

    bar = Positions(io.StringIO(), clock=Clock())
    bar.reading("s", total_known=True)
    with progress.observing(bar):
        assert sum(1 for _ in read_samples(str(path), "s")) == 10_000
    size = len(line) * 10_000
    assert len(seen) == 3 and seen == sorted(seen) and seen[-1] == size
    assert bar.snapshot() == Reading("s", files=1, files_done=1, done=size, total=size)


def test_nothing_is_reported_without_an_observer(tmp_path: Path) -> None:
    writer = ScalarWriter(tmp_path)
    writer.add_scalar("loss", 1.0, 1, wall_time=T0)
    writer.close()
    assert not progress.active()
    src = TensorBoardSource(TensorBoardConfig(name="tb", type="tensorboard", logdir=str(tmp_path)))
    assert len(asyncio.run(src.poll(T0))) == 1
