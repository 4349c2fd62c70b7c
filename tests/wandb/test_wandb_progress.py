"""What the W&B sources report to a dry-run's progress bar: `.wandb` files by size and records decoded,
the API by bytes and history rows received (no total: the API does not tell one up front)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from fake_wandb import API_KEY, FakeRun, FakeWandb
from gen_offline import write_runs

from alertd import progress
from alertd.progress import Progress, Reading
from alertd.sources.config import WandbConfig, WandbDirConfig
from alertd.sources.wandb.api import WandbSource
from alertd.sources.wandb.offline import WandbDirSource, find_run_files

T0 = 1_767_225_600.0


def test_wandb_dir_reports_every_run_file_up_front_and_its_records_as_decoded(tmp_path: Path) -> None:
    write_runs(tmp_path)
    files = find_run_files(str(tmp_path))
    assert len(files) == 2
    bar = Progress(io.StringIO())
    bar.reading("wbo (wandb_dir)", total_known=True)
    src = WandbDirSource(WandbDirConfig(name="wbo", type="wandb_dir", path=str(tmp_path)))
    with progress.observing(bar):
        assert len(src.read_new()) > 100
    total = sum(os.path.getsize(f) for f in files)  # the SDK finished both runs: every byte is a record
    assert bar.snapshot() == Reading("wbo (wandb_dir)", files=2, files_done=2, done=total, total=total)


@pytest.mark.anyio
async def test_the_api_reports_bytes_and_rows_received(fake: FakeWandb) -> None:
    rows = [{"_step": i, "_timestamp": T0 + i, "_runtime": float(i), "loss": 1.0 / (i + 1)} for i in range(25)]
    fake.add_run(FakeRun("r1", "brave-owl-1", history=rows))
    cfg = WandbConfig(name="wb", type="wandb", project="me/proj", base_url=fake.url, api_key=API_KEY, page_size=10)
    src = WandbSource(cfg)
    bar = Progress(io.StringIO())
    bar.reading("wb (wandb)", total_known=False)
    with progress.observing(bar):
        await src.poll(T0 + 100)
    await src.aclose()
    got = bar.snapshot()
    assert got == Reading("wb (wandb)", files=0, files_done=0, done=got.done, total=None, rows=25)
    assert got.done > 25 * len('"loss":')  # the answers' bytes, four of them
