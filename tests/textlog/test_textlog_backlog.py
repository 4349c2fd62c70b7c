"""A log longer than one poll reads (`linetail.MAX_POLL`, here made 4 KiB, read 1 KiB at a time) is read in
bounded polls, the rest at the next: every line once, in order; a dry-run polls until it has it all. The same
for a CSV file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textlog_helpers import Closing, by_metric, source

from alertd.cli import _poll_all
from alertd.sources import linetail
from alertd.sources.config import CsvConfig, TextLogConfig
from alertd.sources.csvfile import CsvSource
from alertd.sources.textlog import TextLogSource

LINES = 3000


@pytest.fixture(autouse=True)
def small_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linetail, "MAX_POLL", 4096)
    monkeypatch.setattr(linetail, "MAX_READ", 1024)


def test_a_log_longer_than_a_poll_is_read_in_bounded_polls_every_line_once(
    tmp_path: Path, closing: Closing[TextLogSource]
) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"step={s} loss={1 + s / 1e4:.4f}\n" for s in range(LINES)))
    src = closing(source(log))
    first = src.read_new(1.0)
    assert 0 < len(first) < LINES / 10 and src.behind
    got, polls = list(first), 1
    while src.behind:
        got += src.read_new(1.0)
        polls += 1
    assert by_metric(got, "loss") == [(s, float(f"{1 + s / 1e4:.4f}")) for s in range(LINES)]
    assert polls >= log.stat().st_size // (4096 + linetail.MAX_READ) and polls > 10
    with open(log, "a") as f:
        f.write(f"step={LINES} loss=nan\n")
    (last,) = src.read_new(2.0)
    assert (last.step, str(last.value)) == (LINES, "nan") and not src.behind


def test_a_dry_run_polls_a_long_log_until_it_has_read_it_all(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"step={s} loss=2.0\n" for s in range(LINES)) + f"step={LINES} loss=nan\n")
    got = asyncio.run(_poll_all(TextLogConfig(type="textlog", name="log", path=str(log))))
    assert [s for s, _ in by_metric(got, "loss")] == list(range(LINES + 1))


def test_a_csv_file_longer_than_a_poll_is_read_in_bounded_polls_every_row_once(
    tmp_path: Path, closing: Closing[CsvSource]
) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{s / 100}\n" for s in range(LINES)))
    src = closing(CsvSource(CsvConfig(type="csv", name="csv", path=str(path))))
    got, polls = src.read_new(1.0), 1
    assert src.behind
    while src.behind:
        got += src.read_new(1.0)
        polls += 1
    assert [(s.step, s.value) for s in got if s.series.metric == "loss"] == [(s, s / 100) for s in range(LINES)]
    assert polls > 5
