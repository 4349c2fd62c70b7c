"""The `wandb` source against the fake W&B GraphQL server on 127.0.0.1."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from fake_wandb import API_KEY, FakeRun, FakeWandb
from pydantic import ValidationError

from alertd.errors import SourceError
from alertd.model import Sample
from alertd.sources.config import WandbConfig
from alertd.sources.wandb.api import WandbSource

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the fake runs' createdAt


def row(step: int, **values: Any) -> dict[str, Any]:
    return {"_step": step, "_timestamp": T0 + step, "_runtime": float(step), **values}


def make(fake: FakeWandb, sleeps: list[float] | None = None, **kw: Any) -> WandbSource:
    cfg = WandbConfig(name="wb", type="wandb", project="me/proj", base_url=fake.url, api_key=API_KEY, **kw)

    async def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    return WandbSource(cfg, sleep=sleep)


def by_metric(samples: list[Sample], metric: str, run: str = "me/proj/r1") -> list[tuple[int | None, float]]:
    return [(s.step, s.value) for s in samples if s.series.metric == metric and s.series.label("run") == run]


def same(a: list[tuple[int | None, float]], b: list[tuple[int | None, float]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and (x[1] == y[1] or (math.isnan(x[1]) and math.isnan(y[1]))) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.anyio
async def test_first_poll_reads_the_whole_history_paged_with_labels_and_nan(fake: FakeWandb) -> None:
    rows = [row(i, **{"train/loss": 1.0 / (i + 1), "eval": {"acc": i / 10}, "note": "x"}) for i in range(25)]
    rows[7]["train/loss"] = math.nan
    rows[8]["train/loss"] = math.inf
    rows[9]["train/loss"] = "-Infinity"
    fake.add_run(FakeRun("r1", "brave-owl-1", heartbeat_at="2026-01-01T00:00:30", history=rows))
    src = make(fake, page_size=10)
    out = list(await src.poll(T0 + 100))
    expected = [(i, 1.0 / (i + 1)) for i in range(25)]
    expected[7:10] = [(7, math.nan), (8, math.inf), (9, -math.inf)]
    assert same(by_metric(out, "train/loss"), expected)
    assert by_metric(out, "eval.acc")[3] == (3, 0.3)
    assert by_metric(out, "note") == []
    loss = next(s for s in out if s.series.metric == "train/loss")
    assert loss.series.label_dict() == {"source": "wb", "run": "me/proj/r1", "run_name": "brave-owl-1"}
    assert loss.time == T0
    assert by_metric(out, "run.heartbeat_age") == [(None, 70.0)]
    # runs list, then AlertdRunPoll [0,10), then HistoryPage [10,20) and [20,30)
    assert fake.ops() == ["AlertdRuns", "AlertdRunPoll", "HistoryPage", "HistoryPage"]
    assert [(r["variables"]["minStep"], r["variables"]["maxStep"]) for r in fake.requests[1:]] == [
        (0, 10),
        (10, 20),
        (20, 30),
    ]
    await src.aclose()


@pytest.mark.anyio
async def test_steady_state_asks_only_for_new_rows_one_request_per_running_run(fake: FakeWandb) -> None:
    run = fake.add_run(FakeRun("r1", history=[row(i, loss=1.0) for i in range(5)]))
    fake.add_run(FakeRun("r2", history=[row(0, loss=2.0)]))
    fake.add_run(FakeRun("old", state="finished", history=[row(0, loss=3.0)]))
    src = make(fake)
    await src.poll(T0)
    fake.requests.clear()
    run.history += [row(5, loss=0.5), row(6, loss=0.25)]
    out = list(await src.poll(T0 + 30))
    assert by_metric(out, "loss") == [(5, 0.5), (6, 0.25)]
    assert by_metric(out, "loss", "me/proj/r2") == []
    assert fake.ops() == ["AlertdRuns", "AlertdRunPoll", "AlertdRunPoll"]
    polls = {r["variables"]["run"]: r["variables"]["minStep"] for r in fake.requests[1:]}
    assert polls == {"r1": 5, "r2": 1}
    assert src.requests == 3 + 3
    await src.aclose()


@pytest.mark.anyio
async def test_system_metrics_are_mapped_and_deduplicated_on_timestamp(fake: FakeWandb) -> None:
    ev = [
        {
            "system.gpu.0.gpu": 90.0 + i,
            "system.gpu.1.temp": 70,
            "system.cpu": 12.5,
            "system.gpu.0.memoryAllocated": 40,
            "_timestamp": T0 + 10 * i,
            "_runtime": 10 * i,
            "_wandb": True,
        }
        for i in range(3)
    ]
    run = fake.add_run(FakeRun("r1", events=ev))
    src = make(fake)
    out = list(await src.poll(T0))
    util = [s for s in out if s.series.metric == "gpu.utilization"]
    assert [(s.time, s.value, s.series.label("gpu")) for s in util] == [
        (T0, 90.0, "0"),
        (T0 + 10, 91.0, "0"),
        (T0 + 20, 92.0, "0"),
    ]
    assert {s.series.metric for s in out} >= {"gpu.temperature", "system.cpu", "gpu.memory.utilization"}
    run.events.append({**ev[-1], "_timestamp": T0 + 30, "system.gpu.0.gpu": 5.0})
    out = list(await src.poll(T0 + 30))
    assert [(s.time, s.value) for s in out if s.series.metric == "gpu.utilization"] == [(T0 + 30, 5.0)]
    await src.aclose()


@pytest.mark.anyio
async def test_a_run_finishing_emits_finished_once_and_its_tail_rows(fake: FakeWandb) -> None:
    run = fake.add_run(FakeRun("r1", history=[row(0, loss=1.0)]))
    crash = fake.add_run(FakeRun("r2", history=[row(0, loss=1.0)]))
    src = make(fake)
    await src.poll(T0)
    run.history.append(row(1, loss=0.5))
    run.state, crash.state = "finished", "crashed"
    out = list(await src.poll(T0 + 30))
    assert by_metric(out, "loss") == [(1, 0.5)]
    assert by_metric(out, "run.finished") == [(None, 1.0)]
    assert by_metric(out, "run.crashed") == [(None, 0.0)]
    assert by_metric(out, "run.finished", "me/proj/r2") == [(None, 1.0)]
    assert by_metric(out, "run.crashed", "me/proj/r2") == [(None, 1.0)]
    assert by_metric(out, "run.heartbeat_age") == []
    fake.requests.clear()
    assert list(await src.poll(T0 + 60)) == []
    assert fake.ops() == ["AlertdRuns"]
    await src.aclose()


@pytest.mark.anyio
async def test_cursor_and_restore_continue_after_the_last_step(fake: FakeWandb) -> None:
    run = fake.add_run(
        FakeRun("r1", history=[row(i, loss=1.0) for i in range(3)], events=[{"system.cpu": 1, "_timestamp": T0}])
    )
    first = make(fake)
    await first.poll(T0)
    cursor = first.cursor()
    run.history.append(row(3, loss=0.1))
    second = make(fake)
    second.restore(cursor)
    fake.requests.clear()
    out = list(await second.poll(T0 + 30))
    assert by_metric(out, "loss") == [(3, 0.1)]
    assert by_metric(out, "system.cpu") == []
    assert fake.requests[1]["variables"]["minStep"] == 3


@pytest.mark.anyio
async def test_runs_list_of_ids_and_all(fake: FakeWandb) -> None:
    fake.add_run(FakeRun("r1", history=[row(0, loss=1.0)]))
    fake.add_run(FakeRun("r2", state="finished", history=[row(0, loss=2.0)]))
    fake.add_run(FakeRun("r3", history=[row(0, loss=3.0)]))
    out = list(await make(fake, runs=["r2"]).poll(T0))
    assert {s.series.label("run") for s in out} == {"me/proj/r2"}
    assert fake.requests[0]["variables"]["filters"] == '{"name": {"$in": ["r2"]}}'
    out = list(await make(fake, runs="all").poll(T0))
    assert {s.series.label("run") for s in out} == {"me/proj/r1", "me/proj/r2", "me/proj/r3"}


@pytest.mark.anyio
async def test_429_retry_after_is_honoured_in_seconds_and_as_a_date(fake: FakeWandb) -> None:
    fake.add_run(FakeRun("r1", history=[row(0, loss=1.0)]))
    sleeps: list[float] = []
    src = make(fake, sleeps)
    fake.fail_next(429, {"Retry-After": "7"})
    when = datetime.fromtimestamp(T0 + 12, tz=UTC)
    fake.fail_next(429, {"Retry-After": format_datetime(when, usegmt=True)})
    fake.fail_next(429, {"RateLimit-Remaining": "0", "RateLimit-Reset": "3"})
    out = list(await src.poll(T0))
    assert by_metric(out, "loss") == [(0, 1.0)]
    assert sleeps == [7.0, 12.0, 3.0]
    assert fake.ops()[:4] == ["AlertdRuns"] * 4


@pytest.mark.anyio
async def test_500s_back_off_then_succeed_and_too_many_give_a_recoverable_error(fake: FakeWandb) -> None:
    fake.add_run(FakeRun("r1", history=[row(0, loss=1.0)]))
    sleeps: list[float] = []
    src = make(fake, sleeps, max_retries=3)
    fake.fail_next(500, times=2)
    out = list(await src.poll(T0))
    assert by_metric(out, "loss") == [(0, 1.0)]
    assert len(sleeps) == 2 and 2.0 <= sleeps[0] <= 2.5 and 4.0 <= sleeps[1] <= 5.0
    fake.fail_next(503, times=10)
    with pytest.raises(SourceError) as err:
        await src.poll(T0 + 30)
    assert err.value.recoverable and "HTTP 503" in str(err.value) and "4 tries" in str(err.value)


@pytest.mark.anyio
async def test_a_bad_key_fails_clearly_once_without_hammering_or_leaking(
    fake: FakeWandb, caplog: pytest.LogCaptureFixture
) -> None:
    bad_key = "wrongkey-" + "q9" * 20
    cfg = WandbConfig(name="wb", type="wandb", project="me/proj", base_url=fake.url, api_key=bad_key)
    src = WandbSource(cfg)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SourceError) as err:
        await src.poll(T0)
    assert not err.value.recoverable
    assert "refused the API key (HTTP 401)" in str(err.value)
    for t in (T0 + 30, T0 + 60, T0 + 590):
        with pytest.raises(SourceError):
            await src.poll(t)
    assert len(fake.requests) == 1
    with pytest.raises(SourceError):
        await src.poll(T0 + 601)
    assert len(fake.requests) == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "refused the API key" in errors[0].getMessage()
    text = caplog.text + repr(src) + repr(cfg) + str(err.value) + repr(src.client)
    assert bad_key not in text and bad_key[:20] not in text
    await src.aclose()


@pytest.mark.anyio
async def test_key_from_environment_and_missing_key(fake: FakeWandb, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add_run(FakeRun("r1", history=[row(0, loss=1.0)]))
    monkeypatch.setenv("WANDB_API_KEY", API_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", fake.url)
    src = WandbSource(WandbConfig(name="wb", type="wandb", project="me/proj"))
    assert by_metric(list(await src.poll(T0)), "loss") == [(0, 1.0)]
    assert fake.requests[0]["user_agent"].startswith("alertd/")
    monkeypatch.delenv("WANDB_API_KEY")
    with pytest.raises(SourceError, match="no API key"):
        await WandbSource(WandbConfig(name="wb", type="wandb", project="me/proj")).poll(T0)


@pytest.mark.anyio
async def test_unknown_project_is_a_clear_error(fake: FakeWandb) -> None:
    cfg = WandbConfig(name="wb", type="wandb", project="me/nope", base_url=fake.url, api_key=API_KEY)
    with pytest.raises(SourceError, match="project me/nope not found") as err:
        await WandbSource(cfg).poll(T0)
    assert not err.value.recoverable


def test_dry_run_over_the_api_reports_a_nan_at_its_step(fake: FakeWandb) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    rows = [row(i, **{"train/loss": 2.0 - i / 100}) for i in range(30)]
    rows[17]["train/loss"] = "NaN"  # As W&B's JSON carries it.
    fake.add_run(FakeRun("r1", "brave-owl-1", state="finished", history=rows))
    rules = Path(__file__).resolve().parents[2] / "rules" / "default.yaml"
    env = {**os.environ, "WANDB_BASE_URL": fake.url, "WANDB_API_KEY": API_KEY}
    done = subprocess.run(
        [sys.executable, "-m", "alertd", "dry-run", "--rules", str(rules), "--source", "wandb:me/proj/r1",
         "--format", "json"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    nan = [(x["rule"], x["state"], x["step"]) for x in lines if x["rule"] == "loss_not_finite"]
    assert nan == [("loss_not_finite", "firing", 17), ("loss_not_finite", "resolved", 18)]
    assert lines[0]["labels"]["run"] == "me/proj/r1" and lines[0]["labels"]["run_name"] == "brave-owl-1"
    assert API_KEY not in done.stdout + done.stderr


@pytest.mark.anyio
async def test_the_api_key_comes_from_a_secret_file(fake: FakeWandb, tmp_path: Path) -> None:
    (tmp_path / "key").write_text(API_KEY + "\n")  # as a Kubernetes Secret volume leaves it
    fake.add_run(FakeRun("r1", history=[row(0, loss=1.5)]))
    base = {"name": "wb", "type": "wandb", "project": "me/proj"}
    cfg = WandbConfig.model_validate({**base, "base_url": fake.url, "api_key_file": str(tmp_path / "key")})
    assert API_KEY not in repr(cfg)
    src = WandbSource(cfg)
    out = list(await src.poll(T0))
    assert by_metric(out, "loss") == [(0, 1.5)]  # the fake answers only to the right key
    await src.aclose()
    with pytest.raises(ValidationError, match="give api_key or api_key_file, not both"):
        WandbConfig.model_validate({**base, "api_key": "x", "api_key_file": str(tmp_path / "key")})
    with pytest.raises(ValidationError) as err:
        WandbConfig.model_validate({**base, "api_key_file": "/nonexistent"})
    assert "api_key_file: cannot read /nonexistent" in str(err.value)
