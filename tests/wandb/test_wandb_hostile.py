"""A `.wandb` record of deeply nested JSON is skipped with its place; it never costs the samples of
another record or another run's file in the same poll (a NaN included)."""

from __future__ import annotations

import math
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb
from wandb_frames import frame

from alertd.sources.config import WandbDirConfig
from alertd.sources.wandb.offline import WandbDirSource


def _history(step: int, key: str, value_json: str) -> bytes:
    record = pb.Record(history=pb.HistoryRecord(item=[pb.HistoryItem(key=key, value_json=value_json)]))
    record.history.step.num = step
    return record.SerializeToString()


def _write(root: Path, run_id: str, payloads: list[bytes]) -> None:
    d = root / f"offline-run-20260101_000000-{run_id}"
    d.mkdir(parents=True)
    (d / f"run-{run_id}.wandb").write_bytes(frame(payloads))


def test_deeply_nested_json_is_skipped_and_the_other_runs_nan_is_kept(tmp_path: Path) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    _write(tmp_path, "bomb", [_history(1, "loss", deep), _history(2, "loss", "1.5")])
    _write(tmp_path, "good", [_history(7, "loss", "NaN")])
    src = WandbDirSource(WandbDirConfig(name="wbo", type="wandb_dir", path=str(tmp_path)))
    samples = src.read_new()
    got = {(s.series.label("run"), s.step, "nan" if math.isnan(s.value) else s.value) for s in samples}
    assert ("good", 7, "nan") in got
    assert ("bomb", 2, 1.5) in got
