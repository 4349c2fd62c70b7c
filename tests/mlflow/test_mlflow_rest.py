"""The mlflow source over a real `mlflow server` (sqlite), written by MLflow's own client.

The source talks to the server through `Proxy`, which counts the requests of each poll (and, where a
test says so, asks for a bearer token or answers 503 first). Each test writes its own experiment.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from typing import Any

import pytest
from mlflow_kit import T0_MS, MlflowServer, Proxy, ends, log_points, points, same

from alertd.errors import SourceError
from alertd.health import SourceHealth
from alertd.sources.config import MlflowConfig
from alertd.sources.mlflow import MlflowSource, RestSource

pytestmark = pytest.mark.anyio
NAN, INF = math.nan, math.inf
T0 = T0_MS / 1000


def config(**kw: Any) -> MlflowConfig:
    """An mlflow source config named `mf`."""
    return MlflowConfig.model_validate({"type": "mlflow", "name": "mf", **kw})


def experiment(client: Any, prefix: str) -> tuple[str, str]:
    """A new experiment: (id, name)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return client.create_experiment(name), name


async def test_history_with_nan_at_its_step_and_each_run_end_once(
    mlflow_server: MlflowServer, server_client: Any
) -> None:
    exp, name = experiment(server_client, "history")
    good = server_client.create_run(exp, run_name="good").info.run_id
    log_points(server_client, good, "train/loss", [1.0, 0.9, 0.8, NAN, 0.7])
    log_points(server_client, good, "lr", [1e-3, INF, -INF])  # the sqlite store keeps ±Inf as ±1.79e308
    server_client.set_terminated(good, "FINISHED", end_time=T0_MS + 10_000)
    failed = server_client.create_run(exp, run_name="bad").info.run_id
    log_points(server_client, failed, "train/loss", [2.0, 1.5])
    server_client.set_terminated(failed, "FAILED", end_time=T0_MS + 20_000)

    with Proxy(mlflow_server.url) as proxy:
        src = MlflowSource(config(tracking_uri=proxy.url, runs="all", experiments=[name]))
        out = await src.poll(time.time())
        assert same(points(out, "train/loss", good), [(0, 1.0), (1, 0.9), (2, 0.8), (3, NAN), (4, 0.7)])
        assert same(points(out, "lr", good), [(0, 1e-3), (1, INF), (2, -INF)])
        assert same(points(out, "train/loss", failed), [(0, 2.0), (1, 1.5)])
        nan = next(s for s in out if s.series.metric == "train/loss" and s.step == 3)
        assert nan.time == T0 + 3
        assert nan.series.label_dict() == {"source": "mf", "run": good, "run_name": "good", "experiment": name}
        assert ends(out) == {
            (good, "run.finished"): [(T0 + 10, 1.0)],
            (good, "run.crashed"): [(T0 + 10, 0.0)],
            (failed, "run.finished"): [(T0 + 20, 1.0)],
            (failed, "run.crashed"): [(T0 + 20, 1.0)],
        }
        assert proxy.count("metrics/get-history") == 3  # one per (run, key)

        mark = proxy.mark()
        assert await src.poll(time.time()) == []
        assert proxy.count("runs/search", mark) == 1 and proxy.mark() == mark + 1  # nothing new: no history read
        await src.aclose()

        # Every experiment (`experiments/search`): this one's points among them.
        every = MlflowSource(config(tracking_uri=proxy.url, runs="all"))
        assert same(points(await every.poll(time.time()), "train/loss", good), points(out, "train/loss", good))
        await every.aclose()


async def test_a_poll_reads_only_the_new_points_and_the_end_once(
    mlflow_server: MlflowServer, server_client: Any
) -> None:
    exp, _ = experiment(server_client, "tail")
    old = server_client.create_run(exp, run_name="old", start_time=T0_MS).info.run_id
    log_points(server_client, old, "loss", [9.0])
    server_client.set_terminated(old, "FINISHED")
    live = server_client.create_run(exp, run_name="live").info.run_id
    log_points(server_client, live, "loss", [3.0, 2.5, 2.0])
    log_points(server_client, live, "acc", [0.1, 0.2, 0.3])

    with Proxy(mlflow_server.url) as proxy:
        src = MlflowSource(config(tracking_uri=proxy.url, runs="running", experiments=[exp]))
        out = await src.poll(time.time())
        assert same(points(out, "loss"), [(0, 3.0), (1, 2.5), (2, 2.0)])  # not the run that ended before
        assert len(points(out, "acc")) == 3

        log_points(server_client, live, "loss", [1.5, NAN], first_step=3)
        mark = proxy.mark()
        out = await src.poll(time.time())
        assert same(points(out, "loss"), [(3, 1.5), (4, NAN)]) and len(out) == 2
        # Two runs/search (running, ended since), one history request for the one key that logged something.
        assert proxy.count("runs/search", mark) == 2
        assert proxy.count("metrics/get-history-bulk-interval", mark) == 1
        assert proxy.mark() == mark + 3

        flash = server_client.create_run(exp, run_name="flash").info.run_id  # started and crashed between polls
        log_points(server_client, flash, "loss", [7.0])
        server_client.set_terminated(flash, "FAILED", end_time=int(time.time() * 1000))
        out = await src.poll(time.time())
        assert points(out, "loss") == [(0, 7.0)] and ends(out)[(flash, "run.crashed")][0][1] == 1.0

        restarted = MlflowSource(config(tracking_uri=proxy.url, runs="running", experiments=[exp]))
        restarted.restore(json.loads(json.dumps(src.cursor())))  # as the service saves it
        log_points(server_client, live, "loss", [1.0], first_step=5)
        assert same(points(await restarted.poll(time.time()), "loss"), [(5, 1.0)])

        server_client.set_terminated(live, "FINISHED", end_time=T0_MS + 60_000)
        out = await restarted.poll(time.time())
        assert ends(out) == {(live, "run.finished"): [(T0 + 60, 1.0)], (live, "run.crashed"): [(T0 + 60, 0.0)]}
        assert await restarted.poll(time.time()) == []
        await src.aclose()
        await restarted.aclose()


async def test_windows_the_server_would_sample_are_split_and_nothing_is_lost(
    mlflow_server: MlflowServer, server_client: Any
) -> None:
    from mlflow.entities import Metric

    exp, _ = experiment(server_client, "windows")
    live = server_client.create_run(exp).info.run_id
    log_points(server_client, live, "loss", [float(i) for i in range(6)])

    with Proxy(mlflow_server.url) as proxy:
        src = RestSource(config(page_size=4, experiments=[exp]), proxy.url)
        assert len(points(await src.poll(time.time()), "loss")) == 6
        assert proxy.count("metrics/get-history") == 2  # two pages of 4

        new = [NAN if step == 12 else float(step) for step in range(6, 17)]
        log_points(server_client, live, "loss", new, first_step=6)
        out = await src.poll(time.time())
        assert same(points(out, "loss"), list(zip(range(6, 17), new, strict=True)))
        assert src.reader.sampled_windows >= 1

        # Six values at one step (as a metric logged without steps has): more than a window holds.
        at_17 = [Metric("loss", 100.0 + i, T0_MS + 17_000 + i, 17) for i in range(6)]
        server_client.log_batch(live, metrics=at_17)
        out = await src.poll(time.time())
        assert points(out, "loss") == [(17, 100.0 + i) for i in range(6)]
        assert await src.poll(time.time()) == []
        await src.aclose()


async def test_a_wrong_token_is_refused_once_and_never_shown(
    mlflow_server: MlflowServer, server_client: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "wrong-SECRET-4f9c2e"
    _, name = experiment(server_client, "auth")
    caplog.set_level(logging.DEBUG)
    with Proxy(mlflow_server.url, token="right-token") as proxy:
        src = MlflowSource(config(tracking_uri=proxy.url, token=secret, experiments=[name]))
        health = SourceHealth("mf", 10.0)
        for _ in range(2):
            with pytest.raises(SourceError) as err:
                await src.poll(time.time())
            assert not err.value.recoverable
            assert "refused the credentials (HTTP 401)" in str(err.value)
            health.failed(err.value, time.time())
        assert proxy.mark() == 2  # a 401 is not retried
        assert sum("refused the credentials" in r.getMessage() for r in caplog.records) == 1
        assert secret not in caplog.text and secret not in repr(src) and secret not in str(err.value)
        await src.aclose()

        # The right token from the environment, and the URI too.
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "right-token")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.url)
        src = MlflowSource(config(experiments=[name]))
        assert await src.poll(time.time()) == []
        await src.aclose()
    assert "right-token" not in caplog.text


async def test_busy_answers_are_retried_after_their_retry_after(
    mlflow_server: MlflowServer, server_client: Any
) -> None:
    _, name = experiment(server_client, "retry")
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with Proxy(mlflow_server.url) as proxy:
        src = RestSource(config(experiments=[name], max_retry_wait=60), proxy.url, sleep=sleep)
        proxy.fail_next, proxy.retry_after = 2, "1"
        assert await src.poll(time.time()) == []
        assert waits == [1.0, 1.0]
        proxy.fail_next, proxy.retry_after = 1, "3600"
        with pytest.raises(SourceError) as err:
            await src.poll(time.time())
        assert err.value.recoverable and "HTTP 503, server asks to wait 3600s" in str(err.value)
        await src.aclose()
