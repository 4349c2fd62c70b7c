"""Through the real service: what wandb_stop did (the run stopped, or why it refused) reaches the alert's
other receivers, as the kill notifier's reports do."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_wandb import API_KEY, FakeRun, FakeWandb

from alertd.testing.receiver import Receiver

sys.path.insert(0, str(Path(__file__).parents[1] / "service"))

from service_helpers import Alertd, wait_for

pytestmark = pytest.mark.slow

WANDB = '{{name: wb, type: wandb, project: me/proj, base_url: "{wandb}", api_key: "{key}", interval: 0.3s}}'
SAMPLES = '{{name: s, type: samples, path: "{samples}", interval: 0.2s}}'
RULES = """
sources: [{source}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{hook}"}}
  stop: {{type: wandb_stop, base_url: "{wandb}", api_key: "{key}"}}
route:
  receivers: [hook]
  group_wait: 0s
  routes: [{{match: {{severity: critical}}, receivers: [stop, hook]}}]
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def start(tmp_path: Path, fake: FakeWandb, receiver: Receiver, source: str) -> Alertd:
    rules = tmp_path / "rules.yaml"
    fields = {"wandb": fake.url, "key": API_KEY, "samples": tmp_path / "s.jsonl", "hook": receiver.url}
    rules.write_text(RULES.format(source=source.format(**fields), **fields))
    alertd = Alertd(rules, tmp_path / "state")
    alertd.wait_log("alertd started")
    return alertd


def alerts(receiver: Receiver) -> list[dict[str, Any]]:
    """Every alert of every notification the webhook got, in order."""
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [a for b in bodies for a in b["alerts"]]  # type: ignore[attr-defined]


def announced(receiver: Receiver) -> list[dict[str, Any]]:
    return [a for a in alerts(receiver) if a["labels"].get("action") == "wandb_stop"]


def test_the_run_is_stopped_once_and_the_webhook_is_told(tmp_path: Path, fake: FakeWandb, receiver: Receiver) -> None:
    now = time.time()
    rows = [{"_step": i, "_timestamp": now + i, "_runtime": float(i), "train/loss": 2.0 - i / 10} for i in range(5)]
    rows.append({"_step": 5, "_timestamp": now + 5, "_runtime": 5.0, "train/loss": "NaN"})
    fake.add_run(FakeRun("r1", "brave-owl-1", history=rows))
    alertd = start(tmp_path, fake, receiver, WANDB)
    try:
        (note,) = wait_for(lambda: announced(receiver), "the wandb_stop report at the webhook", 40, alertd)
        time.sleep(1.5)  # further polls of the still running run neither stop it again nor announce again
        assert fake.runs["r1"].stopped and fake.ops().count("StopRun") == 1
        fired = [a for a in alerts(receiver) if "action" not in a["labels"]]
        assert [(a["labels"]["alertname"], a["labels"]["run"], a["status"]) for a in fired] == [
            ("loss_not_finite", "me/proj/r1", "firing")
        ]
        assert announced(receiver) == [note]
        assert note["labels"]["notifier"] == "stop" and note["labels"]["run"] == "me/proj/r1"
        assert note["annotations"]["summary"] == (
            "wandb_stop stop for loss_not_finite: asked W&B to stop run me/proj/r1 (state was running)"
        )
        assert API_KEY not in alertd.logs()
    finally:
        alertd.stop()


def test_a_refusal_is_announced_too(tmp_path: Path, fake: FakeWandb, receiver: Receiver) -> None:
    samples = tmp_path / "s.jsonl"
    samples.touch()
    alertd = start(tmp_path, fake, receiver, SAMPLES)
    try:
        line = {"metric": "loss", "labels": {"host": "gpu1"}, "time": time.time(), "step": 7, "value": "NaN"}
        samples.write_text(json.dumps(line) + "\n")
        (note,) = wait_for(lambda: announced(receiver), "the wandb_stop refusal at the webhook", 40, alertd)
        summary = note["annotations"]["summary"]
        assert summary.startswith("wandb_stop stop for loss_not_finite: REFUSED run (none): no run label")
        assert note["labels"]["host"] == "gpu1" and "run" not in note["labels"]
        assert "StopRun" not in fake.ops()
        fired = [a for a in alerts(receiver) if "action" not in a["labels"]]
        assert [a["labels"]["alertname"] for a in fired] == ["loss_not_finite"]
    finally:
        alertd.stop()
