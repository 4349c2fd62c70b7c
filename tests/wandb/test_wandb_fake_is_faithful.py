"""The fake W&B server answers what the real `wandb.Api` (0.31) asks: the same history comes back.

The SDK's wandb-core process talks only to the fake on 127.0.0.1 (WANDB_BASE_URL); its files go to tmp.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_wandb import API_KEY, FakeRun, FakeWandb

from alertd.sources.config import WandbConfig
from alertd.sources.wandb.api import WandbSource

T0 = 1_767_225_600.0


@pytest.fixture(scope="module")
def sdk_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, FakeWandb]]:
    import wandb

    home = tmp_path_factory.mktemp("wandb-home")
    env = {
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DIR": str(home),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_API_KEY": API_KEY,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    rows = [
        {"_step": i, "_timestamp": T0 + i, "_runtime": i, "loss": 1.0 / (i + 1), "eval": {"acc": i / 10}}
        for i in range(30)
    ]
    rows[4]["loss"] = math.nan
    events = [
        {"system.gpu.0.gpu": 50.0 + i, "system.cpu": 3.0, "_timestamp": T0 + 15 * i, "_wandb": True} for i in range(4)
    ]
    with FakeWandb(API_KEY) as fake:
        fake.add_run(FakeRun("r1", "brave-owl-1", history=rows, events=events))
        fake.add_run(FakeRun("r2", state="finished"))
        api = wandb.Api(api_key=API_KEY, overrides={"base_url": fake.url, "entity": "me"})
        yield api, fake
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_sdk_scan_history_and_history_read_back_the_fake_runs(sdk_fake: tuple[Any, FakeWandb]) -> None:
    api, fake = sdk_fake
    run = api.run("me/proj/r1")
    assert (run.id, run.name, run.state, run.lastHistoryStep) == ("r1", "brave-owl-1", "running", 29)
    scanned = list(run.scan_history(page_size=7))
    assert [r["_step"] for r in scanned] == list(range(30))
    assert all(_eq(r["loss"], fake.runs["r1"].history[r["_step"]]["loss"]) for r in scanned)
    assert scanned[3]["eval"] == {"acc": 0.3}
    full = run.history(pandas=False)
    assert [r["_step"] for r in full] == list(range(30)) and math.isnan(full[4]["loss"])
    system = run.history(stream="system", pandas=False)
    assert [r["system.gpu.0.gpu"] for r in system] == [50.0, 51.0, 52.0, 53.0]
    keyed = run.history(keys=["loss"], pandas=False)
    assert [r["_step"] for r in keyed] == list(range(30))
    assert [r.id for r in api.runs("me/proj", filters={"state": "running"})] == ["r1"]
    assert "HistoryPage" in fake.ops() and "Viewer" in fake.ops()
    pages = [(r["variables"]["minStep"], r["variables"]["maxStep"]) for r in fake.requests if r["op"] == "HistoryPage"]
    assert pages[0] == (0, 7) and pages[-1] == (28, 30)


@pytest.mark.anyio
async def test_alertd_reads_the_same_values_the_sdk_reads(sdk_fake: tuple[Any, FakeWandb]) -> None:
    api, fake = sdk_fake
    sdk_rows = list(api.run("me/proj/r1").scan_history())
    cfg = WandbConfig(name="wb", type="wandb", project="me/proj", base_url=fake.url, api_key=API_KEY)
    src = WandbSource(cfg)
    out = list(await src.poll(T0 + 60))
    ours = [(s.step, s.value) for s in out if s.series.metric == "loss"]
    assert len(ours) == len(sdk_rows)
    assert all(st == r["_step"] and _eq(float(r["loss"]), v) for (st, v), r in zip(ours, sdk_rows, strict=True))
    assert [s.value for s in out if s.series.metric == "gpu.utilization"] == [50.0, 51.0, 52.0, 53.0]
    await src.aclose()


def test_runtime_code_does_not_import_wandb() -> None:
    package = Path(__file__).parents[2] / "src" / "alertd" / "sources" / "wandb"
    modules = sorted(package.glob("*.py"))
    assert {m.name for m in modules} >= {"api.py", "offline.py", "records.py", "proto.py", "http.py", "values.py"}
    for module in modules:
        name = module.name
        text = module.read_text()
        assert "import wandb" not in text and "from wandb" not in text, name
