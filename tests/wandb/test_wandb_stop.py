"""The wandb_stop notifier stops the alert's W&B run with the request the real SDK's `Run.stop()` sends."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from fake_wandb import API_KEY, FakeRun, FakeWandb

from alertd.actions.config import WandbStopConfig
from alertd.actions.wandb_stop import WandbStopNotifier
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.receivers import build_notifier

T0 = 1_767_225_600.0


@pytest.fixture
def fake() -> Iterator[FakeWandb]:
    with FakeWandb(API_KEY) as f:
        f.add_run(FakeRun("r1"))
        yield f


def alert(run: str | None = "me/proj/r1", state: TransitionKind = TransitionKind.FIRING) -> Notification:
    labels = {"source": "wb", "metric": "loss"} | ({"run": run} if run is not None else {})
    t = Transition("loss_nan", state, T0 + 30, 5, float("nan"), make_labels(labels), "critical", active_at=T0)
    status = "firing" if state is TransitionKind.FIRING else "resolved"
    return Notification("stop", "g", (), status, (t,), f"k:{status}", T0 + 31)


def notifier(url: str, key: str = API_KEY) -> WandbStopNotifier:
    cfg = WandbStopConfig.model_validate({"type": "wandb_stop", "base_url": url, "api_key": key})
    n = build_notifier("stopper", cfg)
    assert isinstance(n, WandbStopNotifier)
    return n


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def send_close(n: WandbStopNotifier, *notes: Notification) -> None:
    try:
        for note in notes:
            await n.send(note)
    finally:
        await n.aclose()


def test_sdk_stop_and_alertd_stop_send_the_same_operation(tmp_path: Any, fake: FakeWandb) -> None:
    import wandb

    env = {
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
        "WANDB_API_KEY": API_KEY,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        api = wandb.Api(api_key=API_KEY, overrides={"base_url": fake.url, "entity": "me"})
        api.run("me/proj/r1").stop()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    sdk = [r for r in fake.requests if r["op"] == "StopRun"]
    assert len(sdk) == 1 and fake.runs["r1"].stopped
    fake.runs["r1"].stopped = False
    n = notifier(fake.url)
    run(send_close(n, alert()))
    ours = [r for r in fake.requests if r["op"] == "StopRun"]
    assert len(ours) == 2 and ours[1]["variables"] == sdk[0]["variables"]
    assert ours[1]["auth"] == sdk[0]["auth"]
    assert fake.runs["r1"].stopped


def test_once_per_firing_never_on_resolution(fake: FakeWandb) -> None:
    n = notifier(fake.url)
    run(send_close(n, alert(state=TransitionKind.RESOLVED), alert(), alert()))
    assert fake.ops().count("StopRun") == 1 and fake.runs["r1"].stopped
    assert len(n.history) == 1 and n.history[0].stopped and n.history[0].run == "me/proj/r1"


@pytest.mark.parametrize("label", [None, "exp1", "me/proj/nosuchrun"])
def test_an_alert_without_a_w_and_b_run_is_refused(fake: FakeWandb, label: str | None) -> None:
    n = notifier(fake.url)
    run(send_close(n, alert(label)))
    assert "StopRun" not in fake.ops() and not fake.runs["r1"].stopped
    assert len(n.history) == 1 and n.history[0].refused and not n.history[0].stopped


def test_401_is_permanent_and_the_key_is_never_logged(fake: FakeWandb, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    n = notifier(fake.url, key="wrong-" + "k" * 40)
    with pytest.raises(NotifyError) as err:
        run(send_close(n, alert()))
    assert not err.value.recoverable and "401" in str(err.value)
    assert "k" * 40 not in str(err.value) and "k" * 40 not in caplog.text
    assert not fake.runs["r1"].stopped


def test_503_is_retried_then_stops(fake: FakeWandb, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.fail_next(503)
    n = notifier(fake.url)

    async def go() -> None:
        with pytest.raises(NotifyError) as err:
            await n.send(alert())
        assert err.value.recoverable
        assert not fake.runs["r1"].stopped
        await send_close(n, alert())  # the delivery stage's retry

    run(go())
    assert fake.runs["r1"].stopped and len(n.history) == 1
    assert API_KEY not in caplog.text and API_KEY[-20:] not in caplog.text
