"""What the mlflow source reports to a dry-run's progress bar: a file store's metric files (found run by run,
so no total up front) as their lines become samples; a tracking server's answers and points."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mlflow_kit import MlflowServer, log_points

from alertd import progress
from alertd.progress import Progress, Reading
from alertd.sources.config import MlflowConfig
from alertd.sources.mlflow import MlflowSource


def config(**kw: Any) -> MlflowConfig:
    return MlflowConfig.model_validate({"type": "mlflow", "name": "mf", "runs": "all", **kw})


def test_a_file_stores_metric_files_are_counted_and_read_to_their_end(file_client: Any, mlruns: Path) -> None:
    exp = file_client.create_experiment("progress")
    for name in ("a", "b"):
        run = file_client.create_run(exp, run_name=name).info.run_id
        log_points(file_client, run, "train/loss", [1.0 / (i + 1) for i in range(500)])
        log_points(file_client, run, "lr", [1e-3] * 10)
    metric_files = [p for p in mlruns.glob("*/*/metrics/**/*") if p.is_file()]
    assert len(metric_files) == 4  # train/loss (in a folder train/) and lr, of each run
    bar = Progress(io.StringIO())
    bar.reading("mf (mlflow)", total_known=False)
    src = MlflowSource(config(tracking_uri=str(mlruns)))
    with progress.observing(bar):
        assert len(asyncio.run(src.poll(time.time()))) == 2 * 510
    asyncio.run(src.aclose())
    size = sum(p.stat().st_size for p in metric_files)
    assert bar.snapshot() == Reading("mf (mlflow)", files=4, files_done=4, done=size, total=None)


@pytest.mark.anyio
async def test_a_tracking_server_reports_bytes_and_points(mlflow_server: MlflowServer, server_client: Any) -> None:
    name = f"progress-{uuid.uuid4().hex[:8]}"
    exp = server_client.create_experiment(name)
    run = server_client.create_run(exp, run_name="a").info.run_id
    log_points(server_client, run, "train/loss", [1.0 / (i + 1) for i in range(30)])
    bar = Progress(io.StringIO())
    bar.reading("mf (mlflow)", total_known=False)
    src = MlflowSource(config(tracking_uri=mlflow_server.url, experiments=[name]))
    with progress.observing(bar):
        await src.poll(time.time())
    await src.aclose()
    got = bar.snapshot()
    assert (got.files, got.total, got.rows) == (0, None, 30)
    assert got.done > 30 * len('"value":')
