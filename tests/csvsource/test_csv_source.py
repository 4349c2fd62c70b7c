"""CsvSource over hand-written CSV files: cells, labels, replaced and vanished files, cursors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from alertd.sources.csvfile import parse_step, split_row

LOGGER = "alertd.sources.csvfile"


def test_cells_steps_times_and_quoting(tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.csv"
    path.write_text(
        '\ufeffstep,"loss, train",acc,note,timestamp,"multi\nline"\r\n'
        "0,1.5,,hello,1700000100,3\r\n"
        "12.0,NaN,Infinity,,1700000200.5,-inf\r\n"
        "\r\n"
        "3,abc,0.5,x,not-a-time,\r\n"
        "4.5, 1 ,2,,,,\r\n"
        ",,,,,\r\n"
        "5,7,8,hello,,,9\r\n",
        newline="",
    )
    src = kit.make_source(path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        samples = src.read_new(kit.NOW)
    got = {(s.series.metric, s.step, kit.triple("", None, s.value)[2], s.time) for s in samples}
    assert got == {
        ("loss, train", 0, "1.5", 1700000100.0),
        ("multi\nline", 0, "3.0", 1700000100.0),
        ("loss, train", 12, "nan", 1700000200.5),
        ("acc", 12, "inf", 1700000200.5),
        ("multi\nline", 12, "-inf", 1700000200.5),
        ("acc", 3, "0.5", kit.NOW),
        ("loss, train", None, "1.0", kit.NOW),
        ("acc", None, "2.0", kit.NOW),
        ("loss, train", 5, "7.0", kit.NOW),
        ("acc", 5, "8.0", kit.NOW),
    }
    assert len(samples) == len(got)
    assert src.bad_cells == 6  # hello twice, abc, x, not-a-time, 4.5
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 5, warned  # once per column (note, loss, timestamp, step) and once for the extra cell
    assert sum("'note'" in w for w in warned) == 1
    assert {s.series.labels for s in samples} == {(("run", "m"), ("source", "pl"))}


def test_a_header_spanning_lines_is_not_taken_for_a_rewrite(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "m.csv"
    path.write_text('step,"val\nloss"\n0,1\n', newline="")
    src = kit.make_source(path)
    seen = list(src.read_new(kit.NOW))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for step in range(1, 4):
            with open(path, "a", newline="") as f:
                f.write(f"{step},{step + 1}\n")
            seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected([(i, {"val\nloss": i + 1.0}) for i in range(4)])
    assert caplog.records == []


def test_a_quote_never_closed_costs_only_its_own_row(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    rows = [(i, {"loss": i / 8}) for i in range(2, 40)]
    path.write_text('step,note,loss\n1,"oops,0.5\n' + "".join(f"{i},,{i / 8}\n" for i in range(2, 40)), newline="")
    src = kit.make_source(path)
    assert kit.triples(src.read_new(kit.NOW)) == kit.expected(rows)
    assert src.bad_cells == 1  # 'oops,0.5' in the note column


def test_step_column_is_configurable(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    path.write_text("global_step,step,loss\n10,1,0.5\n", newline="")
    samples = kit.make_source(path, step_column="global_step").read_new(kit.NOW)
    assert kit.triples(samples) == kit.expected([(10, {"step": 1.0, "loss": 0.5})])


def test_split_row_and_parse_step() -> None:
    assert split_row("a,,b") == ["a", "", "b"]
    assert split_row('"x, y",2') == ["x, y", "2"]
    assert split_row('"open') is None
    assert split_row('a"b,c') == ['a"b', "c"]
    assert split_row("") == []
    assert [parse_step(c) for c in ("12", "12.0", " 3 ", "1e3", "4.5", "x", "nan")] == [
        12,
        12,
        3,
        1000,
        None,
        None,
        None,
    ]


def test_a_quoted_field_spanning_polls_and_a_restart(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    path.write_text('step,note,loss\n1,"first\n', newline="")
    src = kit.make_source(path)
    assert src.read_new(kit.NOW) == []
    restarted = kit.make_source(path)
    restarted.restore(json.loads(json.dumps(src.cursor())))
    with open(path, "a", newline="") as f:
        f.write('second",0.5\n2,"",0.25\n')
    assert kit.triples(restarted.read_new(kit.NOW)) == kit.expected([(1, {"loss": 0.5}), (2, {"loss": 0.25})])


def test_run_labels_and_new_files_picked_up(tmp_path: Path, kit: SimpleNamespace) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "exp1.csv").write_text("step,loss\n0,1\n")
    by_stem = kit.make_source(logs / "*.csv", name="flat")
    assert {s.series.label("run") for s in by_stem.read_new(kit.NOW)} == {"exp1"}
    (logs / "exp2.CSV").write_text("step,loss\n0,2\n")
    (logs / "exp3.csv").write_text("step,loss\n0,3\n")
    assert {s.series.label("run") for s in by_stem.read_new(kit.NOW)} == {"exp3"}

    deep = tmp_path / "runs" / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "metrics.csv").write_text("step,loss\n0,1\n")
    (tmp_path / "runs" / "metrics.csv").write_text("step,loss\n0,1\n")
    nested = kit.make_source(tmp_path / "runs" / "**" / "metrics.csv")
    assert {s.series.label("run") for s in nested.read_new(kit.NOW)} == {"a/b", "metrics"}
    plain = kit.make_source(deep / "metrics.csv")
    assert {s.series.label("run") for s in plain.read_new(kit.NOW)} == {"metrics"}


def test_rewrite_in_place_keeping_length_and_head(tmp_path: Path, kit: SimpleNamespace) -> None:
    """Numbers reformatted (7 -> 7.00) after the first 256 bytes: LineTail sees no reset, the source does."""
    path = tmp_path / "m.csv"
    rows = [(i, {"loss": 0.5, "count": 7.0}) for i in range(40)]
    body = "".join(f"{i},0.5,7\n" for i in range(40))
    path.write_text("step,loss,count\n" + body)
    src = kit.make_source(path)
    seen = list(src.read_new(kit.NOW))
    new = [(40, {"loss": 0.25, "count": 8.0}), (41, {"loss": 0.125, "count": 9.0})]
    rewritten = "".join(f"{i},0.5,{'7' if i < 30 else '7.00'}\n" for i in range(40)) + "40,0.25,8\n41,0.125,9\n"
    kit.overwrite(path, ("step,loss,count\n" + rewritten).encode())
    seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(rows + new)


def test_same_first_row_but_another_file_found_at_the_last_row_read(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    """A rerun that starts like the old run but differs by the last row consumed is read from its start."""
    path = tmp_path / "m.csv"
    old = [(i, {"loss": 1.0 + i}) for i in range(5)]
    path.write_text("step,loss\n" + "".join(f"{i},{1.0 + i}\n" for i in range(5)))
    src = kit.make_source(path)
    seen = list(src.read_new(kit.NOW))
    new = [(0, {"loss": 1.0})] + [(i, {"loss": 2.0 * i}) for i in range(1, 7)]
    kit.overwrite(path, ("step,loss\n" + "".join(f"{s},{m['loss']}\n" for s, m in new)).encode())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected(old + new)
    assert any("row 5 differs" in r.getMessage() for r in caplog.records)


def test_atomic_replace_by_rename(tmp_path: Path, kit: SimpleNamespace) -> None:
    """A writer that writes a temporary file and renames it over the old one: old rows are not read twice."""
    path = tmp_path / "m.csv"
    old_rows = "".join(f"{i},{i / 10}\n" for i in range(7))
    path.write_text("step,loss\n" + "".join(f"{i},{i / 10}\n" for i in range(5)))
    src = kit.make_source(tmp_path / "*.csv")
    seen = list(src.read_new(kit.NOW))
    path.write_text("step,loss\n" + old_rows)  # rows 5 and 6 are not read before the replacement
    tmp = tmp_path / "m.tmp"
    tmp.write_text("loss,step,val\n" + "".join(f"{i / 10},{i}," + "\n" for i in range(7)) + "0.7,7,1.5\n")
    os.replace(tmp, path)
    seen += src.read_new(kit.NOW)
    expected = [(i, {"loss": i / 10}) for i in range(7)] + [(7, {"loss": 0.7, "val": 1.5})]
    assert kit.triples(seen) == kit.expected(expected)


def test_rotation_by_rename_to_a_matched_name(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    path.write_text("step,loss\n0,1\n1,2\n")
    src = kit.make_source(tmp_path / "*.csv")
    seen = list(src.read_new(kit.NOW))
    with open(path, "a") as f:
        f.write("2,3\n")
    os.rename(path, tmp_path / "m.1.csv")
    path.write_text("step,loss\n0,10\n")
    seen += src.read_new(kit.NOW)
    seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected([(0, {"loss": 1}), (1, {"loss": 2}), (2, {"loss": 3}), (0, {"loss": 10})])


def test_vanished_file_is_dropped_and_checked_when_it_returns(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    content = "step,loss\n0,1\n1,2\n"
    path.write_text(content)
    src = kit.make_source(tmp_path / "*.csv")
    assert len(src.read_new(kit.NOW)) == 2
    path.unlink()
    assert src.read_new(kit.NOW) == []
    assert src.read_new(kit.NOW) == []
    (tmp_path / "hold").write_text("")  # takes the freed inode number, so the file comes back as another inode
    path.write_text(content)  # the same file back: nothing new
    assert src.read_new(kit.NOW) == []
    path.unlink()
    assert src.read_new(kit.NOW) == []
    path.write_text("step,loss\n0,5\n")  # another file: read as new
    assert kit.triples(src.read_new(kit.NOW)) == kit.expected([(0, {"loss": 5})])
    cursor = json.loads(json.dumps(src.cursor()))
    assert set(cursor["files"]) == {str(path)}


def test_poll_runs_in_a_thread_and_garbage_cursors_are_ignored(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = tmp_path / "m.csv"
    path.write_text("step,loss\n0,1\n")
    src = kit.make_source(path)
    src.restore({"files": {str(path): {"rows": "many"}, "x": 3}})
    src.restore({"nonsense": True})
    samples = asyncio.run(src.poll(kit.NOW))
    assert kit.triples(samples) == kit.expected([(0, {"loss": 1})])
    asyncio.run(src.aclose())


def test_a_file_turned_fifo_is_warned_once_and_retried(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "m.csv"
    path.write_text("step,loss\n0,1\n")
    src = kit.make_source(tmp_path / "*.csv")
    seen = list(src.read_new(kit.NOW))
    path.unlink()
    os.mkfifo(path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert src.read_new(kit.NOW) == []
        assert src.read_new(kit.NOW) == []
    assert len(caplog.records) == 1 and "cannot read" in caplog.records[0].getMessage()
    path.unlink()
    path.write_text("step,loss\n0,1\n1,2\n")
    seen += src.read_new(kit.NOW)
    assert kit.triples(seen) == kit.expected([(0, {"loss": 1}), (1, {"loss": 2})])


def test_a_header_of_40000_columns_is_read_to_max_columns_and_says_so(tmp_path: Path, kit: SimpleNamespace) -> None:
    wide, fine = tmp_path / "wide" / "metrics.csv", tmp_path / "fine" / "metrics.csv"
    wide.parent.mkdir(), fine.parent.mkdir()
    wide.write_text("step," + ",".join(f"m{i}" for i in range(40_000)) + "\n1," + ",".join(["0.5"] * 40_000) + "\n")
    fine.write_text("step,loss\n1,nan\n")
    src = kit.make_source(tmp_path / "*" / "metrics.csv")
    samples = src.read_new(kit.NOW)
    by_run = {run: {s.series.metric for s in samples if s.series.label("run") == run} for run in ("wide", "fine")}
    assert by_run["wide"] == {f"m{i}" for i in range(10_000)} and by_run["fine"] == {"loss"}
    (cut,) = src.take_cuts()  # for the source's health: the file, the limit, where the reading stops
    assert cut == (
        f"csv source pl: {wide}: the header has 40000 metric columns, over max_columns (10000): "
        "the columns from 'm10000' on are not read"
    )
    with wide.open("a") as f:  # every poll that reads its rows says so again; one that reads none does not
        f.write("2," + ",".join(["1.5"] * 40_000) + "\n")
    assert len(src.read_new(kit.NOW)) == 10_000 and len(src.take_cuts()) == 1
    assert src.read_new(kit.NOW) == [] and src.take_cuts() == []
