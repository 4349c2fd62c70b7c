"""A source at its series limit, full of old runs, still alerts on a new run's NaN: the real service makes
room by forgetting the series idle longest, but not one whose alert is firing (a real webhook receiver)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver, free_port

RULES = """
buffer: {{max_series_per_source: 4}}
sources: [{{name: s, type: samples, path: "{path}", interval: 0.2s}}]
notifiers: {{hook: {{type: webhook, url: "{url}"}}}}
route: {{receivers: [hook], group_by: [run], group_wait: 0s}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""


def _line(run: str, value: float | str, t: float) -> str:
    return json.dumps({"metric": "loss", "labels": {"source": "s", "run": run}, "time": t, "step": 1, "value": value})


def _alerted(receiver: Receiver, run: str) -> bool:
    with receiver.recorder.lock:
        bodies: list[Any] = list(receiver.recorder.bodies)
    return any(a["labels"].get("run") == run and a["status"] == "firing" for b in bodies for a in b["alerts"])


def test_a_source_full_of_idle_runs_still_alerts_on_a_new_runs_nan(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    old = time.time() - 600
    runs: list[tuple[str, float | str]] = [("a", "NaN"), ("b", 1.0), ("c", 1.0), ("d", 1.0)]  # 10 minutes ago
    samples.write_text("".join(_line(run, v, old + i) + "\n" for i, (run, v) in enumerate(runs)))
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(path=samples, url=receiver.url))
    port = free_port()
    alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{port}")
    try:
        wait_for(lambda: _alerted(receiver, "a"), "run a's NaN to be delivered", alertd=alertd)
        with samples.open("a") as f:
            f.write(_line("new", "NaN", time.time()) + "\n")
        wait_for(lambda: _alerted(receiver, "new"), "the new run's NaN to be delivered", alertd=alertd)
        series = httpx.get(f"http://127.0.0.1:{port}/api/v1/series", params={"limit": 1000}).json()["series"]
        held = {(s["metric"], s["labels"].get("run")) for s in series}
        assert ("loss", "a") in held and ("loss", "new") in held  # a's alert fires: it kept its place
        assert ("alertd.series.evicted", None) in held and ("alertd.series.dropped", None) not in held
        assert len([k for k in held if not k[0].startswith("alertd.")]) == 4
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'alertd_series_evicted_total{source="s"}' in metrics
    finally:
        assert alertd.stop() == 0
        receiver.stop()
    logs = alertd.logs()
    assert logs.count("give their place to new ones") == 1 and "Traceback" not in logs
