"""File-system notifications drive the file sources' reads: alertd run as a process, its polling turned
(almost) off, sees what is written at once; directories created, deleted and made again are followed."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver
from alertd.testing.tbwriter import ScalarWriter

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 1h, rescan: 1h, watch: {watch}}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def start(tmp_path: Path, receiver: Receiver, watch: str = "notify") -> Alertd:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(logdir=tmp_path / "runs", url=receiver.url, watch=watch))
    alertd = Alertd(rules, tmp_path / "state")
    alertd.wait_log("reading on file-system notifications")
    return alertd


def runs_alerted(receiver: Receiver) -> set[str]:
    return {a["labels"]["run"] for body in receiver.recorder.bodies for a in body["alerts"]}


def nan(logdir: Path, run: str, step: int = 1) -> None:
    w = ScalarWriter(logdir / run)
    w.add_scalar("train/loss", 1.0, step - 1)
    w.add_scalar("train/loss", math.nan, step)
    w.flush()


def test_with_polling_off_a_nan_is_seen_through_notifications(tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "runs").mkdir()
    alertd = start(tmp_path, receiver)
    try:
        nan(tmp_path / "runs", "a")
        wait_for(lambda: "a" in runs_alerted(receiver), "the NaN of run a", 10, alertd)
        nan(tmp_path / "runs", "deep/er/b")  # directories made while watching are followed
        wait_for(lambda: "deep/er/b" in runs_alerted(receiver), "the NaN of run deep/er/b", 10, alertd)
    finally:
        alertd.stop()


def test_a_logdir_made_later_and_one_deleted_and_made_again_are_followed(tmp_path: Path, receiver: Receiver) -> None:
    alertd = start(tmp_path, receiver)  # no logdir yet: its parent is watched until it appears
    try:
        nan(tmp_path / "runs", "first")
        wait_for(lambda: "first" in runs_alerted(receiver), "the NaN in a logdir made after the start", 10, alertd)
        shutil.rmtree(tmp_path / "runs")
        nan(tmp_path / "runs", "second")
        wait_for(lambda: "second" in runs_alerted(receiver), "the NaN in the logdir made again", 10, alertd)
    finally:
        alertd.stop()
