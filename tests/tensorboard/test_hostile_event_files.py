"""Hostile event files: a FIFO, a forged record length, bytes cut out of a record, a file rewritten in
place. None may freeze the source or cost another record's (or another file's) samples."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from types import SimpleNamespace

from alertd.sources.tensorboard.tfrecord import frame, masked_crc32c


def _steps(src: object) -> list[int | None]:
    return [s.step for s in src.read_new()]  # type: ignore[attr-defined]


def test_a_forged_length_with_a_valid_crc_loses_only_itself(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(s, {"loss": s}) for s in range(3)])
    length = 2**31
    header = struct.pack("<Q", length)
    forged = header + struct.pack("<I", masked_crc32c(header)) + b"\0" * 64
    with path.open("ab") as f:
        f.write(forged)
        for s in (3, 4):
            f.write(frame(kit.scalar_event(s, {"loss": s}).SerializeToString()))
    src = kit.make_source(tmp_path)
    assert _steps(src) == [0, 1, 2, 3, 4]
    assert src.corrupt_records >= 1


def test_bytes_cut_out_of_a_record_lose_only_that_record(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(s, {"loss": s}) for s in range(5)])
    data = path.read_bytes()
    records = kit.split_records(data)
    start = sum(len(r) for r in records[:3])  # the record of step 2 (after the file-version record)
    path.write_bytes(data[: start + 16] + data[start + 20 :])  # four bytes deleted inside it
    src = kit.make_source(tmp_path)
    assert _steps(src) == [0, 1, 3, 4]


def test_one_damaged_file_never_costs_another_files_nan(tmp_path: Path, kit: SimpleNamespace) -> None:
    bad = kit.write_events(tmp_path / "bad", [kit.scalar_event(0, {"loss": 1.0})])
    with bad.open("ab") as f:
        f.write(b"\xff" * 4096)
    kit.write_events(tmp_path / "good", [kit.scalar_event(7, {"loss": math.nan})])
    src = kit.make_source(tmp_path)
    got = {(s.series.label("run"), s.step) for s in src.read_new() if math.isnan(s.value)}
    assert got == {("good", 7)}


def test_a_file_truncated_and_rewritten_longer_between_polls_is_read_again(
    tmp_path: Path, kit: SimpleNamespace
) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(s, {"loss": 1.0 + s}) for s in range(3)])
    src = kit.make_source(tmp_path)
    assert _steps(src) == [0, 1, 2]
    events = [kit.scalar_event(s, {"loss": math.nan if s == 4 else 5.0 + s}) for s in range(10, 0, -2)]
    data = b"".join(frame(e.SerializeToString()) for e in events)
    with path.open("r+b") as f:  # in place, same name, same inode, longer than before
        f.truncate(0)
        f.write(data)
    samples = src.read_new()
    assert any(math.isnan(s.value) and s.step == 4 for s in samples)
