"""A real Prometheus (Debian's `prometheus`, on deploy/multinode/prometheus.yml) scrapes two live alertd
processes: its query API answers both nodes' `ALERTS` and `ALERTS_FOR_STATE`, and the loss series
`export:` shows, NaN as NaN."""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import Served, free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

if not Path(PROMETHEUS).exists():
    pytest.fail("needs Debian's prometheus: apt-get install prometheus (make system-deps does)", pytrace=False)

RULES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
rules:
  - {{name: loss_nan, metric: train/loss, condition: nonfinite, severity: critical}}
export: {{metrics: ["*loss"]}}
"""


def node(tmp: Path, name: str, rows: list[tuple[str, float]], t: float) -> Served:
    """alertd on a free port whose samples source holds `rows` (run, train/loss value), one step apart."""
    home = tmp / name
    home.mkdir()
    samples = home / "samples.jsonl"
    lines = [
        {
            "metric": "train/loss",
            "labels": {"run": run},
            "time": t,
            "step": step,
            "value": "NaN" if math.isnan(v) else v,
        }
        for step, (run, v) in enumerate(rows)
    ]
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return Served(home, RULES.format(samples=samples))


DEPLOYED = Path(__file__).resolve().parents[2] / "deploy" / "multinode" / "prometheus.yml"
"""The multi-node example's Prometheus config: the one this test runs."""


@contextlib.contextmanager
def prometheus(tmp: Path, targets: list[str], at_once: bool = False) -> Iterator[httpx.Client]:
    """Prometheus on deploy/multinode/prometheus.yml and its training-rules.yml, its API on a free port of
    127.0.0.1: the example nodes replaced by `targets`, the Alertmanager peers by ports nothing listens on,
    the scrape and rule evaluation intervals by 1s (the example's 30s would make a slow test) and, `at_once`,
    the rules' `for:` by 0s; nothing else is changed."""
    nodes = dict(zip(("gpu1.example:9090", "gpu2.example:9090"), targets, strict=True))
    peers = {f"am{i}.example:9093": f"127.0.0.1:{free_port()}" for i in (1, 2)}
    rules = (DEPLOYED.parent / "training-rules.yml").read_text()
    if at_once:
        rules = re.sub(r"for: \d+m", "for: 0s", rules)
    (tmp / "training-rules.yml").write_text(rules)
    text = DEPLOYED.read_text()
    assert "scrape_interval: 30s" in text and "rule_files: [training-rules.yml]" in text
    text = text.replace("scrape_interval: 30s", "scrape_interval: 1s\n  evaluation_interval: 1s")
    for example, real in {**nodes, **peers}.items():
        assert example in text, example
        text = text.replace(example, real)
    assert ".example" not in text, "an address the test does not replace is left"
    config = tmp / "prometheus.yml"
    config.write_text(text)
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    try:
        yield client
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(client: httpx.Client, promql: str) -> list[dict[str, Any]]:
    """The instant vector `promql` gives now ([] while Prometheus is not up)."""
    try:
        r = client.get("/api/v1/query", params={"query": promql})
    except httpx.TransportError:
        return []
    if r.status_code != 200:
        return []
    body = r.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_prometheus_scrapes_alerts_and_exported_losses_from_two_nodes(tmp_path: Path) -> None:
    t = time.time()
    with (
        node(tmp_path, "a", [("exp1", 1.0), ("exp1", math.nan)], t) as a,
        node(tmp_path, "b", [("exp2", math.nan), ("exp3", 0.5), ("exp3", 0.25)], t) as b,
        prometheus(tmp_path, [a.url.removeprefix("http://"), b.url.removeprefix("http://")]) as prom,
    ):
        deadline = time.monotonic() + 25
        alerts: list[dict[str, Any]] = []
        losses: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            alerts = query(prom, "ALERTS")
            losses = query(prom, "train_loss")
            if len(alerts) == 2 and len(losses) == 3:
                break
            time.sleep(0.25)
        logs = (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
        assert len(alerts) == 2 and len(losses) == 3, (alerts, losses, logs)
        for_state = query(prom, "ALERTS_FOR_STATE")
    a_at, b_at = a.url.removeprefix("http://"), b.url.removeprefix("http://")
    common = {"__name__": "ALERTS", "alertname": "loss_nan", "alertstate": "firing", "severity": "critical"}
    common |= {"job": "alertd", "metric": "train/loss", "source": "runs"}
    assert sorted(((x["metric"], x["value"][1]) for x in alerts), key=lambda x: x[0]["run"]) == [
        ({**common, "run": "exp1", "instance": a_at}, "1"),
        ({**common, "run": "exp2", "instance": b_at}, "1"),
    ]
    assert {(x["metric"]["run"], x["metric"]["instance"], x["value"][1]) for x in for_state} == {
        ("exp1", a_at, str(math.floor(t))),
        ("exp2", b_at, str(math.floor(t))),
    }
    assert {(x["metric"]["run"], x["metric"]["instance"], x["value"][1]) for x in losses} == {
        ("exp1", a_at, "NaN"),
        ("exp2", b_at, "NaN"),
        ("exp3", b_at, "0.25"),
    }
    assert {x["metric"]["source"] for x in losses} == {"runs"}


RANK_RULES = """\
sources:
  - {{type: samples, name: train, path: "{samples}", interval: 0.2}}
rules: []
export: {{metrics: [train/step_time, train/step_busy], timestamps: true}}
"""


def ranks_node(tmp: Path, name: str, ranks: list[tuple[str, int, float, float]]) -> Served:
    """alertd whose samples hold, per (run, rank, busy time, age in seconds), that rank's last `train/step_time`
    (0.3 s on every rank: a synchronous job) and `train/step_busy`."""
    home = tmp / name
    home.mkdir()
    samples = home / "samples.jsonl"
    now = time.time()
    lines = [
        {
            "metric": metric,
            "labels": {"run": run, "rank": str(rank)},
            "time": now - age,
            "step": 7,
            "value": value if metric == "train/step_busy" else 0.3,
        }
        for run, rank, value, age in ranks
        for metric in ("train/step_time", "train/step_busy")
    ]
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return Served(home, RANK_RULES.format(samples=samples))


def test_prometheus_names_the_straggler_the_silent_rank_and_the_hung_job_across_two_nodes(tmp_path: Path) -> None:
    """deploy/multinode/training-rules.yml over what two nodes' alertd export: job j1's rank 3 (node b) works
    2.5x the median busy time (its step time alike: a synchronous job), its rank 1 (node a) ended no step for
    5 minutes while the others go on; every rank of job j2 has been silent for 15 minutes."""
    with (
        ranks_node(tmp_path, "a", [("j1", 0, 0.1, 0), ("j1", 1, 0.1, 300), ("j2", 0, 0.1, 900)]) as a,
        ranks_node(tmp_path, "b", [("j1", 2, 0.1, 0), ("j1", 3, 0.25, 0), ("j2", 1, 0.1, 900)]) as b,
        prometheus(tmp_path, [a.url.removeprefix("http://"), b.url.removeprefix("http://")], at_once=True) as prom,
    ):
        deadline = time.monotonic() + 30
        firing: set[tuple[str, str, str]] = set()
        while time.monotonic() < deadline:
            alerts = query(prom, 'ALERTS{alertstate="firing"}')
            firing = {(x["metric"]["alertname"], x["metric"]["run"], x["metric"].get("rank", "")) for x in alerts}
            if len(firing) >= 3:
                break
            time.sleep(0.25)
        logs = (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
    assert firing == {("RankStraggler", "j1", "3"), ("RankStalled", "j1", "1"), ("JobHung", "j2", "")}, logs
