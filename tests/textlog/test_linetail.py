"""LineTail: whole lines only, new bytes only, rotation (rename and copy-truncate), bars, bad bytes, FIFOs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tqdm import tqdm

from alertd.sources.linetail import LineSplitter, LineTail, NotRegularFile


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


TailOf = Callable[..., LineTail]


@pytest.fixture
def tail_of() -> Iterator[TailOf]:
    """`tail_of(path, **kw)`: a `LineTail(str(path), **kw)`, closed when the test ends (its file released)."""
    tails: list[LineTail] = []

    def make(path: Path, **kw: Any) -> LineTail:
        tails.append(LineTail(str(path), **kw))
        return tails[-1]

    yield make
    for tail in tails:
        tail.close()


def test_only_complete_lines_and_only_new_bytes(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"step=1 loss=2.0\nstep=2 lo")
    tail = tail_of(log)
    assert tail.read().lines == ["step=1 loss=2.0"]
    assert tail.read().lines == []  # the cut line waits
    append(log, b"ss=1.9\n")
    assert tail.read().lines == ["step=2 loss=1.9"]
    assert tail.offset == log.stat().st_size
    assert tail.read().lines == []


def test_a_line_cut_at_every_byte_of_a_write_is_read_once_whole(tmp_path: Path, tail_of: TailOf) -> None:
    data = "step=7 loss=nan ñ\n".encode()
    for cut in range(1, len(data)):
        log = tmp_path / f"cut{cut}.log"
        log.write_bytes(data[:cut])
        tail = tail_of(log)
        first = tail.read().lines
        append(log, data[cut:])
        assert first + tail.read().lines == ["step=7 loss=nan ñ"], cut


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(b"loss=\xff\xfe1.0 step=3\nloss=2.0\n")
    assert tail_of(log).read().lines == ["loss=\ufffd\ufffd1.0 step=3", "loss=2.0"]


def test_rotation_by_rename_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=1\n")
    tail = tail_of(log)
    assert tail.read().lines == ["step=1 loss=1"]
    append(log, b"step=2 loss=2\nstep=3 loss=3")  # the writer's last line, unterminated, then it rotates
    os.rename(log, tmp_path / "train.log.1")
    log.write_text("step=4 loss=4\n")
    chunk = tail.read()
    assert chunk.lines == ["step=2 loss=2", "step=3 loss=3", "step=4 loss=4"]
    assert chunk.retired is not None and chunk.retired["offset"] == (tmp_path / "train.log.1").stat().st_size
    append(log, b"step=5 loss=5\n")
    assert tail.read().lines == ["step=5 loss=5"]


def test_a_long_rest_of_a_rotated_file_is_read_in_bounded_pieces_before_the_new_file(
    tmp_path: Path, tail_of: TailOf
) -> None:
    """Rotated while far behind: the old file's rest is read on in pieces of `max_poll` (`behind`), then the new
    file from its start; every line once, in order."""
    log = tmp_path / "train.log"
    log.write_text("step=0 loss=1.0\n")
    tail = tail_of(log, max_read=1024, max_poll=4096, max_line=256)
    assert tail.read().lines == ["step=0 loss=1.0"]
    append(log, "".join(f"step={i} loss=1.0\n" for i in range(1, 2000)).encode())
    os.rename(log, tmp_path / "train.log.1")
    log.write_text("step=2000 loss=2.0\n")
    got, reads, retired = [], 0, []
    while True:
        chunk = tail.read()
        got += chunk.lines
        reads += 1
        retired += [chunk.retired] if chunk.retired is not None else []
        assert sum(len(line) + 1 for line in chunk.lines) <= 4096 + 1024  # the old file's rest and the new one's
        if not tail.behind:
            break
    assert got == [f"step={i} loss={2.0 if i == 2000 else 1.0}" for i in range(1, 2001)] and reads > 5
    assert [r["offset"] for r in retired] == [(tmp_path / "train.log.1").stat().st_size]


def test_rotation_by_copy_truncate_starts_over_without_repeating(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"step={i} loss=1\n" for i in range(100)))
    tail = tail_of(log)
    assert len(tail.read().lines) == 100
    shutil.copyfile(log, tmp_path / "train.log.1")  # logrotate's copytruncate: copy, then truncate in place
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, b"step=100 loss=nan\n")
    chunk = tail.read()
    assert chunk.reset and chunk.lines == ["step=100 loss=nan"]


def test_a_rewrite_that_leaves_the_file_longer_is_noticed_by_its_first_line(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "train.log"
    log.write_text("run A step=1 loss=1\n")
    tail = tail_of(log)
    assert tail.read().lines == ["run A step=1 loss=1"]
    with open(log, "r+b") as f:  # truncated and written again between two reads, longer than before
        f.truncate(0)
        f.write(b"run B step=1 loss=5\nrun B step=2 loss=nan\n")
    chunk = tail.read()
    assert chunk.reset and chunk.lines == ["run B step=1 loss=5", "run B step=2 loss=nan"]


def test_a_real_tqdm_bar_gives_each_state_once_and_its_last_state_once(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "bar.log"
    with open(log, "w") as f:
        bar = tqdm(total=3, file=f, mininterval=0, ascii=True, bar_format="{n}/{total} {postfix}")
        tail = tail_of(log, bars=True)
        seen: list[str] = []
        for i, loss in enumerate(("2.5", "nan", "2.1")):
            bar.set_postfix_str(f"loss={loss}", refresh=False)
            bar.update(1)
            f.flush()
            seen += tail.read().lines
            assert i == 0 or any("loss=" in s for s in seen)
        bar.close()
        f.write("done\n")
    seen += tail.read().lines
    states = [s.strip() for s in seen]
    assert [s for s in states if "loss=" in s] == ["1/3 , loss=2.5", "2/3 , loss=nan", "3/3 , loss=2.1"]
    assert states[-1] == "done"


def test_a_redrawn_identical_bar_state_is_not_read_twice(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "bar.log"
    log.write_bytes(b"\r 10% loss=2.0\r 10% loss=2.0\r 20% loss=1.9\r 20% loss=1.9   \n")
    assert [s.strip() for s in tail_of(log, bars=True).read().lines] == ["10% loss=2.0", "20% loss=1.9"]


def test_identical_log_lines_are_all_read(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "same.log"
    log.write_text("loss=nan\nloss=nan\n")
    assert tail_of(log, bars=True).read().lines == ["loss=nan", "loss=nan"]


def test_an_overlong_line_is_cut_and_the_next_one_read(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * 5000)
    tail = tail_of(log, max_line=1000)
    first = tail.read().lines
    append(log, b"y" * 5000 + b"\nloss=nan\n")
    lines = first + tail.read().lines
    assert lines == ["x" * 1000, "loss=nan"]
    assert tail.cut_lines == 1


def test_a_fifo_named_like_a_log_is_refused_without_blocking(tmp_path: Path, tail_of: TailOf) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):
        tail_of(fifo).read()


def test_cursor_restore_resumes_and_a_different_file_starts_over(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "train.log"
    log.write_text("step=1 loss=1\n")
    tail = tail_of(log)
    tail.read()
    saved = tail.cursor()
    tail.close()
    append(log, b"step=2 loss=2\n")
    again = tail_of(log)
    again.restore(saved)
    assert again.read().lines == ["step=2 loss=2"]
    again.close()
    log.unlink()
    log.write_text("a new run\n")  # same name, another file
    third = tail_of(log)
    third.restore(saved)
    chunk = third.read()
    assert chunk.reset and chunk.lines == ["a new run"]


def test_a_big_backlog_is_read_in_bounded_pieces(tmp_path: Path, tail_of: TailOf) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"step={i} loss=1.0\n" for i in range(20000)))
    tail = tail_of(log, max_read=4096)
    lines = tail.read().lines
    assert len(lines) == 20000 and lines[-1] == "step=19999 loss=1.0"


def test_a_backlog_longer_than_one_read_takes_is_read_on_by_the_next_reads(tmp_path: Path, tail_of: TailOf) -> None:
    """`max_poll` bounds what one `read()` holds (a multi-gigabyte log is not read whole at once); `behind` says
    there is more, and the next reads go on from there: every line once, in order, none cut."""
    log = tmp_path / "big.log"
    want = [f"step={i} loss=1.0" for i in range(20000)]
    log.write_text("".join(line + "\n" for line in want))
    tail = tail_of(log, max_read=4096, max_poll=65536)
    first = tail.read().lines
    assert tail.behind and 65536 <= sum(len(line) + 1 for line in first) <= 65536 + 4096
    got, reads = list(first), 1
    while tail.behind:
        got += tail.read().lines
        reads += 1
    size = log.stat().st_size
    assert got == want and size // (65536 + 4096) <= reads <= -(-size // 65536)
    append(log, b"step=20000 loss=0.5\n")
    assert tail.read().lines == ["step=20000 loss=0.5"] and not tail.behind


_PIECES = st.lists(st.sampled_from(["a", "step=1 loss=2.0", " ", "\t", "ñ", "\n", "\n\n", "x" * 9]), max_size=12)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_PIECES.map("".join), min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["", "\r 10%|#"]),
)
def test_lines_without_carriage_returns_are_split_list_wise_as_line_by_line(
    texts: list[str], bars: bool, skipping: bool, last_bar: str
) -> None:
    """`split`'s list-wise way for text with no `\\r` gives the lines, cuts and state of the line by line way
    (overlong lines at max_line 8, the end of an overlong line being dropped, a bar's last state)."""
    fast, slow = LineSplitter(bars=bars, max_line=8), LineSplitter(bars=bars, max_line=8)
    for s in (fast, slow):
        s._skipping, s._last_bar = skipping, last_bar
    got: list[str] = []
    want: list[str] = []
    for text in texts:
        text += "\n"  # complete lines, as `split` hands them over
        fast._plain_lines(text, got)
        slow._each_line(text, want)
        assert got == want
        assert (fast.cut_lines, fast._skipping, fast._last_bar, fast._after_cr) == (
            slow.cut_lines,
            slow._skipping,
            slow._last_bar,
            slow._after_cr,
        )
