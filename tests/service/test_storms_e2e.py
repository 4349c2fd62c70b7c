"""Storms freeze no alerting: whatever one source sends, a NaN in another reaches the webhook within seconds.

alertd runs as a real process with two sources: the storm in one (a CSV header of 40,000 columns, 40,000
metrics of one run in one read, a Prometheus answer of 10,000 NaN series, an MLflow `meta.yaml` that is an
alias bomb) and a canary (a samples file) in which a NaN is written while the storm is under way. The
canary's alert reaches a real webhook receiver within 5 s of its NaN, `/healthz` keeps answering, and the
storm source's error names the limit its data went over (`/api/v1/sources`).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver, free_port

sys.path.insert(0, str(Path(__file__).parents[1] / "prometheus_source"))
sys.path.insert(0, str(Path(__file__).parents[1] / "mlflow"))

RULES = """
sources:
  - {{name: canary, type: samples, path: "{canary}", interval: 0.5s}}
  - {storm}
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 10s}}
route: {{receivers: [hook], group_by: {group_by}, group_wait: 0s, group_interval: 1s}}
rules:
  - {{name: canary_nan, metric: loss, labels_match: {{source: canary}}, condition: nonfinite, severity: critical}}
  - {{name: storm_nan, metric: ["storm*", "loss"], labels_match: {{source: storm}}, condition: nonfinite}}
"""
LATENCY = 5.0
"""Seconds within which the canary's NaN must reach the receiver, whatever the storm."""


class Storm:
    """alertd with a canary and a storm source, a webhook receiver, and what the test reads of them."""

    def __init__(self, tmp_path: Path, storm: str, group_by: str = "[rule, run]") -> None:
        self.receiver = Receiver()
        self.canary = tmp_path / "canary.jsonl"
        self.canary.touch()
        self.port = free_port()
        rules = tmp_path / "rules.yaml"
        rules.write_text(RULES.format(canary=self.canary, storm=storm, url=self.receiver.url, group_by=group_by))
        self.alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{self.port}")
        self.alertd.wait_log("alertd started")
        self.health: list[float] = []

    def close(self) -> None:
        self.alertd.stop()
        self.receiver.stop()

    def get(self, path: str) -> Any:
        """An API answer (a slow one fails the test: 5 s)."""
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=LATENCY) as resp:
            body = json.loads(resp.read())
        if path == "/healthz":
            self.health.append(time.monotonic() - started)
        return body

    def source(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(s for s in self.get("/api/v1/sources") if s["name"] == name)
        return found

    def alerts(self, rule: str) -> list[dict[str, Any]]:
        """Every alert of `rule` delivered, with the time its notification arrived (time.monotonic)."""
        with self.receiver.recorder.lock:
            got = list(zip(self.receiver.recorder.bodies, self.receiver.recorder.arrivals, strict=True))
        return [{**a, "arrived": at} for body, at in got for a in body["alerts"] if a["labels"]["alertname"] == rule]

    def told(self, rule: str) -> int:
        """How many distinct alerts of `rule` were delivered."""
        return len({a["fingerprint"] for a in self.alerts(rule)})

    def notifications(self, rule: str) -> list[dict[str, Any]]:
        """The notifications that told an alert of `rule`."""
        with self.receiver.recorder.lock:
            bodies = list(self.receiver.recorder.bodies)
        return [b for b in bodies if any(a["labels"]["alertname"] == rule for a in b["alerts"])]

    def canary_nan(self) -> float:
        """A NaN in the canary's file, now; when it was written."""
        line = {"metric": "loss", "labels": {"run": "canary"}, "time": time.time(), "step": 1, "value": "NaN"}
        self.canary.write_text(json.dumps(line) + "\n")
        return time.monotonic()

    def canary_alerted_within(self, written: float) -> float:
        """Wait for the canary's alert at the receiver, /healthz asked all the while; its latency."""

        def arrived() -> float | None:
            assert self.get("/healthz") == {"status": "ok"}
            got = self.alerts("canary_nan")
            return got[0]["arrived"] - written if got else None

        latency: float = wait_for(arrived, "the canary's alert", 30, self.alertd)
        print(f"canary latency {latency:.2f}s, /healthz at most {max(self.health):.2f}s")
        assert latency < LATENCY, f"the canary's NaN took {latency:.1f}s to reach the receiver"
        assert max(self.health) < LATENCY
        return latency


@pytest.fixture
def storms(tmp_path: Path) -> Iterator[list[Storm]]:
    made: list[Storm] = []
    yield made
    for storm in made:
        storm.close()


def test_a_csv_header_of_40000_columns(tmp_path: Path, storms: list[Storm]) -> None:
    path = tmp_path / "storm" / "metrics.csv"
    path.parent.mkdir()
    s = Storm(tmp_path, f'{{name: storm, type: csv, path: "{tmp_path}/*/metrics.csv", interval: 0.5s}}')
    storms.append(s)
    columns = [f"storm{i}" for i in range(40_000)]
    with path.open("w") as f:  # a NaN in every column, a few rows
        f.write("step," + ",".join(columns) + "\n")
        for step in range(3):
            f.write(f"{step}," + ",".join(["nan"] * len(columns)) + "\n")
    wait_for(lambda: s.source("storm")["samples"], "the storm's read", 30, s.alertd)
    s.canary_alerted_within(s.canary_nan())
    error = wait_for(lambda: s.source("storm")["lastError"], "the storm source's error", 30, s.alertd)
    assert "the header has 40000 metric columns, over max_columns (10000)" in error
    assert not s.source("storm")["up"] and s.source("canary")["up"]
    # The storm's 10,000 alerts (the columns read) are grouped: a few notifications, not thousands.
    wait_for(
        lambda: len({a["fingerprint"] for a in s.alerts("storm_nan")}) == 10_000, "the storm's alerts", 60, s.alertd
    )
    assert len(s.notifications("storm_nan")) < 20


def test_40000_metrics_of_one_run_in_one_read(tmp_path: Path, storms: list[Storm]) -> None:
    path = tmp_path / "storm.jsonl"
    path.touch()
    s = Storm(tmp_path, f'{{name: storm, type: samples, path: "{path}", interval: 0.5s}}')
    storms.append(s)
    now = time.time()
    lines = (
        json.dumps({"metric": f"storm{i}", "labels": {"run": "r"}, "time": now, "step": 1, "value": 1.0})
        for i in range(40_000)
    )
    whole = tmp_path / "storm.tmp"  # written aside and renamed in: the source sees all 40,000 lines in one read
    whole.write_text("\n".join(lines) + "\n")
    whole.replace(path)
    wait_for(lambda: s.source("storm")["samples"], "the storm's read", 30, s.alertd)
    s.canary_alerted_within(s.canary_nan())
    error = wait_for(lambda: s.source("storm")["lastError"], "the storm source's error", 30, s.alertd)
    assert "20000 samples of new series dropped at the series limit (20000 series for this source" in error
    # The storm's source reads on: its runs' series within the limit still alert.
    with path.open("a") as f:
        f.write(
            json.dumps({"metric": "storm7", "labels": {"run": "r"}, "time": time.time(), "step": 2, "value": "NaN"})
        )
        f.write("\n")
    wait_for(lambda: s.alerts("storm_nan"), "the storm source's own NaN", 30, s.alertd)


def prometheus_answer(series: int, value: str, name: str = "storm_gpu") -> bytes:
    now = time.time()
    result = [{"metric": {"__name__": name, "gpu": str(i)}, "value": [now, value]} for i in range(series)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def test_a_prometheus_answer_of_10000_nan_series(tmp_path: Path, storms: list[Storm]) -> None:
    from prom_testkit import Reply, Seen, scripted

    storm, wide = prometheus_answer(10_000, "NaN"), prometheus_answer(101, "1", "storm_wide")

    def answer(seen: Seen) -> Reply:
        return Reply(200, storm if seen.params.get("query") == "storm_gpu" else wide)

    with scripted(answer) as server:
        queries = "[{query: storm_gpu}, {query: storm_wide, max_series: 100}]"
        config = f'{{name: storm, type: prometheus, url: "{server.url}", interval: 1s, queries: {queries}}}'
        s = Storm(tmp_path, config, group_by="[rule, gpu]")  # each series its own group: 10,000 groups
        storms.append(s)
        wait_for(lambda: s.alerts("storm_nan"), "the storm", 30, s.alertd)
        s.canary_alerted_within(s.canary_nan())
        # Every one of the 10,000 alerts is told, in a few notifications: never one by one.
        wait_for(lambda: s.told("storm_nan") == 10_000, "the storm", 60, s.alertd)
        assert len(s.notifications("storm_nan")) < 50
        error = s.source("storm")["lastError"]
        assert "queries[1] ('storm_wide')" in error and "101 series, more than max_series (100)" in error


def test_an_mlflow_meta_yaml_that_is_an_alias_bomb(
    tmp_path: Path, storms: list[Storm], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow_kit import log_points

    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlruns = tmp_path / "mlruns"
    client = MlflowClient(tracking_uri=f"file:{mlruns}")
    exp = client.create_experiment("storm")
    good = client.create_run(exp, run_name="good").info.run_id
    log_points(client, good, "loss", [1.0])
    bomb = client.create_run(exp, run_name="bomb").info.run_id
    log_points(client, bomb, "loss", [1.0])
    laughs = "".join(  # 2 kB: *h is 43 million strings once expanded
        f"{n}: &{n} [{','.join([f'*{p}'] * 9) if p else ','.join(['lol'] * 9)}]\n"
        for p, n in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
    )
    meta = mlruns / exp / bomb / "meta.yaml"
    meta.write_text(laughs + meta.read_text().replace("run_name: bomb", "run_name: *h"))
    s = Storm(tmp_path, f'{{name: storm, type: mlflow, tracking_uri: "{mlruns}", interval: 0.5s}}')
    storms.append(s)
    error = wait_for(lambda: s.source("storm")["lastError"], "the storm source's error", 30, s.alertd)
    assert f"{meta}: skipped: the document expands to more than 1000 values" in error
    assert "over the limit of a meta.yaml" in error
    s.canary_alerted_within(s.canary_nan())
    log_points(client, good, "loss", [float("nan")], first_step=1)  # the store's other runs are read on
    wait_for(lambda: s.alerts("storm_nan"), "the good run's NaN", 30, s.alertd)
    status = Path(f"/proc/{s.alertd.proc.pid}/status").read_text().splitlines()
    rss = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
    assert rss < 1 << 20, f"alertd holds {rss} KiB"  # the bomb was never expanded (it took 5.7 GiB)
