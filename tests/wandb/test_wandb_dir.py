"""The `wandb_dir` source on `.wandb` files written by the real `wandb` SDK in offline mode."""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gen_offline import expected_loss, write_runs
from wandb_frames import BLOCK, frame, payloads_of

from alertd.model import Sample
from alertd.sources.config import WandbDirConfig
from alertd.sources.wandb.offline import WandbDirSource, find_run_files
from alertd.sources.wandb.proto import ExitInfo, HistoryRow, RunInfo, StatsRow, decode_record
from alertd.sources.wandb.records import LogReader

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the offline runs `good` and `bad` of gen_offline.py (written once)."""
    root = tmp_path_factory.mktemp("offline")
    write_runs(root)
    return root


def run_file(root: Path, run_id: str) -> Path:
    return next(Path(p) for p in find_run_files(str(root)) if p.endswith(f"run-{run_id}.wandb"))


def source(path: Path | str) -> WandbDirSource:
    return WandbDirSource(WandbDirConfig(name="wbo", type="wandb_dir", path=str(path)))


def series(samples: list[Sample], metric: str, run: str = "good") -> list[tuple[int | None, float]]:
    return [(s.step, s.value) for s in samples if s.series.metric == metric and s.series.label("run") == run]


def same(a: list[Sample], b: list[Sample]) -> bool:
    key = [(s.series, s.time, s.step, s.value if not math.isnan(s.value) else "nan") for s in a]
    return key == [(s.series, s.time, s.step, s.value if not math.isnan(s.value) else "nan") for s in b]


def test_sdk_offline_runs_read_back_exactly(offline: Path) -> None:
    src = source(offline)
    out = src.read_new()
    loss = series(out, "loss")
    assert [st for st, _ in loss] == list(range(40))
    for step, value in loss:
        want = expected_loss(step)
        assert (math.isnan(value) and math.isnan(want)) or value == want
    assert series(out, "train/acc")[7] == (7, 0.07)
    assert series(out, "eval.f1")[5] == (5, 0.1)
    assert series(out, "tag") == [] and series(out, "blob") == []
    first = next(s for s in out if s.series.metric == "loss")
    assert first.series.label_dict() == {"source": "wbo", "run": "good", "run_name": "good-run"}
    assert abs(first.time - os.path.getmtime(run_file(offline, "good"))) < 600
    assert series(out, "run.finished") == [(None, 1.0)] and series(out, "run.crashed") == [(None, 0.0)]
    assert series(out, "loss", "bad") == [(0, 1.0), (1, 1.0), (2, 1.0)]
    assert series(out, "run.crashed", "bad") == [(None, 1.0)]
    assert src.corrupt_records == 0 and src.read_new() == []


def test_sdk_system_metrics_are_read(offline: Path) -> None:
    out = source(offline).read_new()
    mem = [s for s in out if s.series.metric == "system.memory_percent"]
    steps = [s for s in out if s.series.metric == "loss"]
    assert len(mem) >= 2 and all(s.step is None and 0 < s.value <= 100 for s in mem)
    assert steps[0].time - 5 < mem[0].time < steps[-1].time + 5


def test_decoder_agrees_with_the_sdk_protobuf_on_every_record(offline: Path) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    kinds = set()
    for payload in payloads_of(run_file(offline, "good").read_bytes()):
        ref = pb.Record.FromString(payload)
        ours = decode_record(payload)
        kind = ref.WhichOneof("record_type")
        kinds.add(kind)
        if kind == "history":
            assert isinstance(ours, HistoryRow)
            assert set(ours.values) == {".".join(i.nested_key) or i.key for i in ref.history.item}
            assert ours.step == ref.history.step.num
        elif kind == "stats":
            assert isinstance(ours, StatsRow)
            assert set(ours.values) == {i.key for i in ref.stats.item}
            assert ours.time == pytest.approx(ref.stats.timestamp.seconds + ref.stats.timestamp.nanos / 1e9)
        elif kind == "run":
            assert isinstance(ours, RunInfo)
            assert (ours.run_id, ours.project, ours.display_name) == ("good", "proj", "good-run")
        elif kind == "exit":
            assert isinstance(ours, ExitInfo) and ours.exit_code == ref.exit.exit_code
        else:
            assert ours is None
    assert {"history", "stats", "run", "exit"} <= kinds


def test_a_file_read_while_written_gives_the_same_samples(offline: Path, tmp_path: Path) -> None:
    data = run_file(offline, "good").read_bytes()
    whole = source(run_file(offline, "good")).read_new()
    target = tmp_path / "run-good.wandb"
    cuts = sorted({*range(0, len(data), 2311), 6, 7, 8, 13, BLOCK - 1, BLOCK, BLOCK + 7, 2 * BLOCK + 3, len(data) - 1})
    for cut in cuts:
        target.write_bytes(data[:cut])
        src = source(tmp_path)
        part = src.read_new()
        assert src.corrupt_records == 0, cut
        with target.open("ab") as f:
            f.write(data[cut:])
        assert same(part + src.read_new(), whole), cut


def test_growing_file_is_tailed_a_few_bytes_at_a_time(offline: Path, tmp_path: Path) -> None:
    data = run_file(offline, "bad").read_bytes()
    target = tmp_path / "run-bad.wandb"
    target.write_bytes(b"")
    src = source(tmp_path)
    got: list[Sample] = []
    for i in range(0, len(data), 97):
        with target.open("ab") as f:
            f.write(data[i : i + 97])
        got += src.read_new()
    assert same(got, source(run_file(offline, "bad")).read_new())


def test_truncated_file_returns_complete_records_only(offline: Path, tmp_path: Path) -> None:
    data = run_file(offline, "good").read_bytes()
    target = tmp_path / "run-good.wandb"
    target.write_bytes(data[: 3 * BLOCK + 100])
    src = source(tmp_path)
    out = src.read_new()
    got = [(st, "nan" if math.isnan(v) else v) for st, v in series(out, "loss")]
    assert got == [(st, "nan" if math.isnan(expected_loss(st)) else expected_loss(st)) for st in range(20)]
    assert src.corrupt_records == 0 and series(out, "run.finished") == []


def test_damaged_chunk_is_skipped_reported_once_and_reading_goes_on(
    offline: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = run_file(offline, "good")
    data = bytearray(path.read_bytes())
    at = next(o for o, p in LogReader(str(path)).read()[0] if getattr(decode_record(p), "step", None) == 20)
    assert at // BLOCK != (at + 70_000) // BLOCK  # the step-20 row (with its blob) spans blocks
    data[at + 100] ^= 0xFF  # inside its FIRST chunk: the rest of the record is dropped quietly
    target = tmp_path / "run-good.wandb"
    target.write_bytes(bytes(data))
    src = source(tmp_path)
    with caplog.at_level(logging.WARNING):
        out = src.read_new()
        assert src.read_new() == []
    assert src.corrupt_records == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(target) in warnings[0] and "offset" in warnings[0]
    assert [st for st, _ in series(out, "loss")] == [*range(20), *range(21, 40)]
    assert series(out, "run.finished") == [(None, 1.0)]


def test_bad_record_inside_a_good_chunk_and_bad_header(offline: Path, tmp_path: Path) -> None:
    good = payloads_of(run_file(offline, "bad").read_bytes())
    (tmp_path / "run-x.wandb").write_bytes(frame([*good[:3], b"\x12\xff\xff\xff", *good[3:]]))
    (tmp_path / "run-y.wandb").write_bytes(b"not a wandb file at all")
    src = source(tmp_path)
    out = src.read_new()
    assert series(out, "loss", "bad") == [(0, 1.0), (1, 1.0), (2, 1.0)]
    assert src.corrupt_records == 2
    assert src.read_new() == [] and src.corrupt_records == 2


def test_cursor_restore_and_directory_layouts(offline: Path, tmp_path: Path) -> None:
    first = source(offline / "wandb")
    whole = first.read_new()
    assert same(whole, source(offline).read_new())
    run_dir = run_file(offline, "good").parent
    assert same(source(run_dir).read_new(), [s for s in whole if s.series.label("run") == "good"])
    copy = tmp_path / "wandb" / run_dir.name
    shutil.copytree(run_dir, copy)
    data = (copy / "run-good.wandb").read_bytes()
    (copy / "run-good.wandb").write_bytes(data[: BLOCK + 10])
    a = source(tmp_path)
    part = a.read_new()
    b = source(tmp_path)
    b.restore(a.cursor())
    (copy / "run-good.wandb").write_bytes(data)
    rest = b.read_new()
    assert same(part + rest, [s for s in whole if s.series.label("run") == "good"])
    assert rest[0].series.label("run_name") == "good-run"


@pytest.mark.anyio
async def test_async_poll(offline: Path) -> None:
    src = source(offline)
    assert len(await src.poll(0.0)) > 100
    assert list(await src.poll(0.0)) == []
    await src.aclose()


def test_dry_run_reports_the_nan_loss_of_a_real_offline_run_at_its_step(offline: Path) -> None:
    import json

    rules = Path(__file__).resolve().parents[2] / "rules" / "default.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "alertd",
            "dry-run",
            "--rules",
            str(rules),
            "--source",
            f"wandb_dir:{offline}",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    nan = [x for x in lines if x["rule"] == "loss_not_finite"]
    assert [(x["state"], x["step"], x["value"]) for x in nan][:2] == [("firing", 10, "NaN"), ("resolved", 12, 1 / 13)]
    # Offline runs know no entity: the run label is the run id.
    assert nan[0]["labels"]["run_name"] == "good-run" and nan[0]["labels"]["run"] == "good"
    crashed = [x for x in lines if x["rule"] == "run_crashed"]
    assert [(x["state"], x["labels"]["run"]) for x in crashed] == [("firing", "bad")]
