"""TensorBoardSource over real event files written by TensorBoard's EventFileWriter."""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.sources.tensorboard.tfrecord import frame, masked_crc32c

LOGGER = "alertd.sources.tensorboard.source"


def test_reads_all_encodings_with_labels_from_the_file_name(tmp_path: Path, kit: SimpleNamespace) -> None:
    events = []
    for i, enc in enumerate(kit.ENCODINGS):
        events.append(kit.scalar_event(i, {f"m/{enc}": 0.5, f"n/{enc}": math.nan, f"i/{enc}": -math.inf}, encoding=enc))
    path = kit.write_events(tmp_path, events)
    samples = kit.make_source(tmp_path, name="tb1").read_new()
    assert len(samples) == 3 * len(kit.ENCODINGS)
    labels = {s.series.labels for s in samples}
    assert labels == {(("host", socket.gethostname()), ("pid", str(os.getpid())), ("run", "."), ("source", "tb1"))}
    by_metric = {s.series.metric: s for s in samples}
    for i, enc in enumerate(kit.ENCODINGS):
        assert by_metric[f"m/{enc}"].value == 0.5
        assert math.isnan(by_metric[f"n/{enc}"].value)
        assert by_metric[f"i/{enc}"].value == -math.inf
        assert by_metric[f"m/{enc}"].step == i
        assert by_metric[f"m/{enc}"].time == 1_700_000_000.0 + i
    assert path.name.startswith("events.out.tfevents.")


def test_second_poll_returns_only_new_events_of_a_growing_file(tmp_path: Path, kit: SimpleNamespace) -> None:
    src = kit.make_source(tmp_path)
    writer = EventFileWriter(str(tmp_path), max_queue_size=1)
    assert src.read_new() == []
    seen = []
    for step in range(30):
        writer.add_event(kit.scalar_event(step, {"loss": step / 10}))
        writer.flush()
        if step % 7 == 0:
            seen += src.read_new()
    writer.close()
    seen += src.read_new()
    assert [s.step for s in seen] == list(range(30))
    assert src.read_new() == []


def test_file_cut_at_every_byte_then_completed(tmp_path: Path, kit: SimpleNamespace) -> None:
    full = kit.write_events(
        tmp_path / "w",
        [kit.scalar_event(s, {"a": s, "b": -s}, encoding=e) for s, e in enumerate(kit.ENCODINGS)],
    ).read_bytes()
    records = kit.split_records(full)
    ends = [sum(len(r) for r in records[: i + 1]) for i in range(len(records))]
    want = [(t, ".", s, float(v)) for s in range(len(kit.ENCODINGS)) for t, v in (("a", s), ("b", -s))]
    for cut in range(len(full) + 1):
        run = tmp_path / f"cut{cut}"
        run.mkdir()
        path = run / "events.out.tfevents.1700000000.h.1.0"
        path.write_bytes(full[:cut])
        src = kit.make_source(run)
        first = kit.view(src.read_new())
        complete_events = sum(1 for e in ends[1:] if e <= cut)  # record 0 is the file_version event
        assert first == want[: 2 * complete_events], cut
        with path.open("ab") as f:
            f.write(full[cut:])
        assert first + kit.view(src.read_new()) == want, cut
        assert src.corrupt_records == 0


def _flip(path: Path, offset: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _corrupt_case(tmp_path: Path, kit: SimpleNamespace) -> tuple[Path, list[int]]:
    path = kit.write_events(tmp_path, [kit.scalar_event(s, {"loss": s}) for s in range(6)])
    records = kit.split_records(path.read_bytes())
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    return path, starts


def test_flipped_data_byte_skips_that_record_reports_once(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    path, starts = _corrupt_case(tmp_path, kit)
    _flip(path, starts[3] + 14)  # inside the payload of the event at step 2
    src = kit.make_source(tmp_path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert [s.step for s in src.read_new()] == [0, 1, 3, 4, 5]
        with path.open("ab") as f:
            f.write(frame(kit.scalar_event(6, {"loss": 6}).SerializeToString()))
        assert [s.step for s in src.read_new()] == [6]
        assert src.read_new() == []
    warnings = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    skipped = starts[4] - starts[3]  # the damaged record, all of it
    assert warnings == [f"corrupt record in {path} at byte {starts[3]} (bad data CRC); skipped {skipped} bytes"]
    assert src.corrupt_records == 1


@pytest.mark.parametrize("where", [0, 9], ids=["length-byte", "length-crc"])
def test_bad_length_crc_resyncs_to_the_next_record(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture, where: int
) -> None:
    path, starts = _corrupt_case(tmp_path, kit)
    _flip(path, starts[3] + where, 0x40)
    src = kit.make_source(tmp_path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert [s.step for s in src.read_new()] == [0, 1, 3, 4, 5]
    warnings = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    skipped = starts[4] - starts[3]
    assert warnings == [f"corrupt record in {path} at byte {starts[3]} (bad length CRC); skipped {skipped} bytes"]
    assert src.corrupt_records == 1


def test_garbage_then_records_across_polls_is_reported_once(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(0, {"loss": 0})])
    src = kit.make_source(tmp_path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert [s.step for s in src.read_new()] == [0]
        with path.open("ab") as f:
            f.write(b"\x13not a record, written by something else" * 5)
        assert src.read_new() == []
        with path.open("ab") as f:
            f.write(frame(kit.scalar_event(1, {"loss": 1}).SerializeToString()))
        assert [s.step for s in src.read_new()] == [1]
    assert len([r for r in caplog.records if "corrupt" in r.getMessage()]) == 1
    assert src.corrupt_records == 1


def test_zero_filled_tail_is_waited_for(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(0, {"loss": 0})])
    size = path.stat().st_size
    src = kit.make_source(tmp_path)
    assert len(src.read_new()) == 1
    with path.open("ab") as f:
        f.write(bytes(64))  # preallocated / not yet visible
    assert src.read_new() == [] and src.corrupt_records == 0
    record = frame(kit.scalar_event(1, {"loss": 1}).SerializeToString())
    with path.open("r+b") as f:
        f.seek(size)
        f.write(record)
    assert [s.step for s in src.read_new()] == [1]
    assert src.corrupt_records == 0


def test_runs_and_files_appearing_later_and_ordered_files(tmp_path: Path, kit: SimpleNamespace) -> None:
    src = kit.make_source(tmp_path)
    kit.write_events(tmp_path / "exp1", [kit.scalar_event(0, {"loss": 1.0})])
    assert kit.view(src.read_new()) == [("loss", "exp1", 0, 1.0)]
    deep = tmp_path / "grid" / "lr=0.1"
    kit.write_events(deep, [kit.scalar_event(5, {"acc": 0.5})])
    kit.write_events(tmp_path, [kit.scalar_event(9, {"x": 9.0})])
    assert sorted(kit.view(src.read_new())) == [("acc", "grid/lr=0.1", 5, 0.5), ("x", ".", 9, 9.0)]
    # one run, three files: read by the time in the name, then by name (not by listing order)
    run = tmp_path / "multi"
    run.mkdir()
    for name, step in [
        ("b.tfevents.1700000001.h", 2),
        ("a.tfevents.1700000002.h", 3),
        ("a.tfevents.1700000001.h", 1),
    ]:
        (run / name).write_bytes(frame(kit.scalar_event(step, {"m": step}).SerializeToString()))
    assert [s.step for s in src.read_new()] == [1, 2, 3]


def test_add_scalars_sub_runs_torch_and_tensorboardx_layouts(tmp_path: Path, kit: SimpleNamespace) -> None:
    # torch SummaryWriter.add_scalars("grp/a", {"train": 1, "val": 2}, 7): one writer per key under
    # logdir/<main_tag with "/" -> "_">_<key>, each writing the tag main_tag.
    for key, value in {"train": 1.0, "val": 2.0}.items():
        kit.write_events(tmp_path / f"{'grp/a'.replace('/', '_')}_{key}", [kit.scalar_event(7, {"grp/a": value})])
    # tensorboardX add_scalars: os.path.join(logdir, main_tag, key), same tag.
    kit.write_events(tmp_path / "x" / "grp" / "a" / "train", [kit.scalar_event(7, {"grp/a": 3.0})])
    got = sorted(kit.view(kit.make_source(tmp_path).read_new()))
    assert got == [
        ("grp/a", "grp_a_train", 7, 1.0),
        ("grp/a", "grp_a_val", 7, 2.0),
        ("grp/a", "x/grp/a/train", 7, 3.0),
    ]


def test_tensorboardx_style_name_sets_host_only(tmp_path: Path, kit: SimpleNamespace) -> None:
    name = "events.out.tfevents.1700000000.node7.example.org"
    (tmp_path / name).write_bytes(frame(kit.scalar_event(1, {"loss": 1}).SerializeToString()))
    (s,) = kit.make_source(tmp_path).read_new()
    assert s.series.label_dict() == {"host": "node7.example.org", "run": ".", "source": "tb"}


def test_session_log_start_is_recorded_and_logged(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    events = [kit.scalar_event(s, {"loss": s}) for s in range(3)]
    events += [kit.session_start(1, 1_800_000_000.0), kit.scalar_event(1, {"loss": 9})]
    kit.write_events(tmp_path / "r", events)
    src = kit.make_source(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert [s.step for s in src.read_new()] == [0, 1, 2, 1]
    assert src.restarts == [("r", 1, 1_800_000_000.0)]
    assert any("SessionLog.START at step 1" in r.getMessage() for r in caplog.records)


def test_logdir_missing_then_appears(tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture) -> None:
    logdir = tmp_path / "later"
    src = kit.make_source(logdir)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert src.read_new() == [] and src.read_new() == []
        kit.write_events(logdir, [kit.scalar_event(1, {"loss": 1})])
        assert [s.step for s in src.read_new()] == [1]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("does not exist yet" in m for m in messages) == 1


def test_cursor_restore_resumes_without_duplicates(tmp_path: Path, kit: SimpleNamespace) -> None:
    path = kit.write_events(tmp_path / "r", [kit.scalar_event(s, {"loss": s}) for s in range(4)])
    first = kit.make_source(tmp_path)
    assert len(first.read_new()) == 4
    saved = first.cursor()
    size = path.stat().st_size
    assert saved == {f"r/{path.name}": [size, size, masked_crc32c(path.read_bytes())]}
    with path.open("ab") as f:
        f.write(frame(kit.scalar_event(4, {"loss": 4}).SerializeToString()))
    kit.write_events(tmp_path / "new", [kit.scalar_event(0, {"other": 1})])
    second = kit.make_source(tmp_path)
    second.restore(saved)
    assert sorted(kit.view(second.read_new())) == [("loss", "r", 4, 4.0), ("other", "new", 0, 1.0)]


def test_restore_beyond_the_end_rereads_a_replaced_file(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    path = kit.write_events(tmp_path, [kit.scalar_event(0, {"loss": 0})])
    src = kit.make_source(tmp_path)
    src.restore({path.name: 10**9})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert [s.step for s in src.read_new()] == [0]
    assert any("was truncated; reading it again from the start" in r.getMessage() for r in caplog.records)


def test_deleted_run_is_dropped_quietly(tmp_path: Path, kit: SimpleNamespace) -> None:
    kit.write_events(tmp_path / "gone", [kit.scalar_event(0, {"loss": 0})])
    src = kit.make_source(tmp_path)
    assert len(src.read_new()) == 1
    shutil.rmtree(tmp_path / "gone")
    assert src.read_new() == [] and src.cursor() == {}


@pytest.mark.anyio
async def test_poll_runs_read_new(tmp_path: Path, kit: SimpleNamespace) -> None:
    kit.write_events(tmp_path, [kit.scalar_event(3, {"loss": 0.5})])
    src = kit.make_source(tmp_path)
    assert (src.name, src.interval) == ("tb", 1.0)
    got = await src.poll(0.0)
    assert [(s.series.metric, s.value) for s in got] == [("loss", 0.5)]
    assert await src.poll(1.0) == []
    await src.aclose()


def test_file_version_record_alone_gives_nothing(tmp_path: Path, kit: SimpleNamespace) -> None:
    writer = EventFileWriter(str(tmp_path))
    writer.close()
    src = kit.make_source(tmp_path)
    assert src.read_new() == []
    assert event_pb2.Event.FromString(kit.split_records(next(tmp_path.iterdir()).read_bytes())[0][12:-4]).file_version


def test_backlog_larger_than_one_read_is_read_in_one_poll(
    tmp_path: Path, kit: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alertd.sources.tensorboard.source as tb

    monkeypatch.setattr(tb, "_MAX_READ", 100)  # our own chunk size, so that records span chunks
    big = {f"tag{i:03d}": float(i) for i in range(40)}  # one record of about 700 bytes
    events = [kit.scalar_event(s, {"loss": s}) for s in range(20)] + [kit.scalar_event(20, big)]
    kit.write_events(tmp_path, events)
    got = kit.make_source(tmp_path).read_new()
    assert [s.step for s in got] == list(range(20)) + [20] * 40


def test_unreadable_file_is_warned_once_and_read_later(
    tmp_path: Path, kit: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    real = kit.write_events(tmp_path / "elsewhere", [kit.scalar_event(0, {"loss": 0})])
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    path = logdir / real.name
    path.symlink_to(path.name)  # a symlink loop: stat and open fail with ELOOP
    src = kit.make_source(logdir)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert src.read_new() == [] and src.read_new() == []
    assert sum("cannot read event file" in r.getMessage() for r in caplog.records) == 1
    path.unlink()
    shutil.copy(real, path)
    assert kit.view(src.read_new()) == [("loss", ".", 0, 0.0)]
