"""File-system notifications drive the file sources' reads: alertd run as a process, its polling turned
(almost) off, sees what is written at once; directories created, deleted and made again are followed."""

from __future__ import annotations

import json
import math
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver, free_port
from alertd.testing.tbwriter import ScalarWriter, scalar_record

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


def start(tmp_path: Path, receiver: Receiver, *extra: str, rules_text: str = RULES) -> Alertd:
    rules = tmp_path / "rules.yaml"
    rules.write_text(rules_text.format(logdir=tmp_path / "runs", url=receiver.url, watch="notify"))
    alertd = Alertd(rules, tmp_path / "state", *extra)
    alertd.wait_log("reading on file-system notifications")
    return alertd


def source_info(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/sources", timeout=5) as resp:
        info: dict[str, object] = json.loads(resp.read())[0]
        return info


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


def test_a_burst_of_writes_is_read_in_a_few_reads_not_one_per_write(tmp_path: Path, receiver: Receiver) -> None:
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1780000000.host.1.0"
    path.write_bytes(scalar_record("train/loss", 1.0, 0))
    port = free_port()
    alertd = start(tmp_path, receiver, "--listen", f"127.0.0.1:{port}")
    try:
        wait_for(lambda: source_info(port)["samples"] == 1, "the first sample", 10, alertd)
        before = source_info(port)["reads"]
        records = [scalar_record("train/loss", 1.0 / step, step) for step in range(1, 1001)]
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            for record in records:  # 1,000 flushes, as a writer flushing after every scalar makes them
                os.write(fd, record)
        finally:
            os.close(fd)
        wait_for(lambda: source_info(port)["samples"] == 1001, "all 1,000 samples", 10, alertd)
        reads = source_info(port)["reads"] - before  # type: ignore[operator]
        assert 1 <= reads <= 100, reads
        assert source_info(port)["watch"] == "notify"
    finally:
        alertd.stop()


FALLBACK = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s, watch: auto}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}"}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
"""


def test_without_inotify_the_source_polls_and_still_sees_the_nan(tmp_path: Path, receiver: Receiver) -> None:
    from asyncinotify import Inotify

    (tmp_path / "runs").mkdir()
    (tmp_path / "rules.yaml").write_text(FALLBACK.format(logdir=tmp_path / "runs", url=receiver.url))
    held = []
    try:  # every inotify instance this user may have is taken: alertd cannot get one
        while len(held) < 100_000:
            held.append(Inotify())
    except OSError:
        pass
    try:
        alertd = Alertd(tmp_path / "rules.yaml", tmp_path / "state")
        alertd.wait_log("source tb: polling every 0.2s (inotify cannot be started")
    finally:
        for ino in held:
            ino.close()
    try:
        nan(tmp_path / "runs", "a")
        wait_for(lambda: "a" in runs_alerted(receiver), "the NaN, found by polling", 10, alertd)
        assert '"level": "warning"' in next(line for line in alertd.logs().splitlines() if "polling every" in line)
    finally:
        alertd.stop()
