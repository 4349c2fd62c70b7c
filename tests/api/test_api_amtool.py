"""The real `amtool` (Debian's prometheus-alertmanager) against a live alertd: Alertmanager's API v2."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Receiver, Served, sample_line

AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"
pytestmark = [pytest.mark.slow]
if not Path(AMTOOL).exists():  # a test dependency (make system-deps installs it): missing is a failure, not a skip
    pytest.fail("amtool is not installed: apt-get install prometheus-alertmanager", pytrace=False)

RULES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
notifiers:
  hook: {{type: webhook, url: "http://127.0.0.1:{port}/hook"}}
route:
  receiver: hook
  group_by: [alertname, run]
  group_wait: 0s
  group_interval: 1s
time_intervals:
  - name: nights
    time_intervals: [{{times: [{{start_time: "22:00", end_time: "24:00"}}], location: Europe/Berlin}}]
rules:
  - name: loss_nan
    metric: train/loss
    condition: nonfinite
    severity: critical
"""


def amtool(url: str, *args: str, config: Path | None = None) -> str:
    argv = [AMTOOL, f"--alertmanager.url={url}", *args]
    if config is not None:
        argv.insert(1, f"--http.config.file={config}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"amtool {' '.join(args)} failed ({done.returncode}): {done.stderr}"
    return done.stdout


def hook_alerts(rec: Receiver) -> list[dict[str, Any]]:
    return [a for _, body in rec.requests for a in json.loads(body)["alerts"]]


def test_amtool_silences_and_queries_alertd(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Receiver() as rec, Served(tmp_path, RULES.format(samples=samples, port=rec.port)) as alertd:
        sid = amtool(
            alertd.url,
            "silence",
            "add",
            "alertname=loss_nan",
            'run=~"exp.*"',
            "--comment=known NaN, fixing the lr",
            "--author=ana",
            "--duration=1h",
        ).strip()
        assert sid  # amtool prints the new silence's id
        listed = json.loads(amtool(alertd.url, "silence", "query", "-o", "json"))
        assert [(s["id"], s["createdBy"], s["status"]["state"]) for s in listed] == [(sid, "ana", "active")]
        assert {(m["name"], m["value"], m["isRegex"]) for m in listed[0]["matchers"]} == {
            ("alertname", "loss_nan", False),
            ("run", "exp.*", True),
        }
        assert [s["id"] for s in alertd.get("/api/v1/silences").json()] == [sid]  # one store for v1 and v2
        assert amtool(alertd.url, "silence", "query", "-q", "alertname=loss_nan").split() == [sid]

        with samples.open("a") as f:
            f.write(sample_line("train/loss", "NaN", 1, run="exp1"))
            f.write(sample_line("train/loss", "NaN", 1, run="base1"))
        # the run the silence does not match is delivered; the silenced one is not
        alertd.wait(lambda: any(a["labels"]["run"] == "base1" for a in hook_alerts(rec)), "base1's alert")
        time.sleep(2.5)  # two more group_interval flushes
        assert {a["labels"]["run"] for a in hook_alerts(rec)} == {"base1"}

        shown = json.loads(amtool(alertd.url, "alert", "query", "-o", "json"))  # amtool's default: not silenced
        assert [a["labels"]["run"] for a in shown] == ["base1"]
        assert shown[0]["labels"]["alertname"] == "loss_nan" and shown[0]["receivers"] == [{"name": "hook"}]
        assert shown[0]["fingerprint"] == hook_alerts(rec)[0]["fingerprint"]
        muted = json.loads(amtool(alertd.url, "alert", "query", "-o", "json", "--silenced", "run=exp1"))
        assert [(a["labels"]["run"], a["status"]["state"], a["status"]["silencedBy"]) for a in muted] == [
            ("exp1", "suppressed", [sid])
        ]

        amtool(alertd.url, "silence", "expire", sid)
        assert amtool(alertd.url, "silence", "query", "-q").split() == []  # expired ones are not listed
        expired = json.loads(amtool(alertd.url, "silence", "query", "--expired", "-o", "json"))
        assert [(s["id"], s["status"]["state"]) for s in expired] == [(sid, "expired")]
        alertd.wait(lambda: any(a["labels"]["run"] == "exp1" for a in hook_alerts(rec)), "exp1's alert after expiry")
        runs = json.loads(amtool(alertd.url, "alert", "query", "-o", "json"))
        assert sorted(a["labels"]["run"] for a in runs) == ["base1", "exp1"]


def test_amtool_with_a_bearer_token(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    token = "amtool-token-5b1e"
    http_config = tmp_path / "http.yml"
    http_config.write_text(f"authorization:\n  credentials: {token}\n")
    with Served(tmp_path, RULES.format(samples=samples, port=9), env={"ALERTD_API_TOKEN": token}) as alertd:
        refused = subprocess.run(
            [AMTOOL, f"--alertmanager.url={alertd.url}", "silence", "query"], capture_output=True, text=True, timeout=30
        )
        assert refused.returncode != 0  # no token: 401
        sid = amtool(alertd.url, "silence", "add", "alertname=x", "--comment=c", "--duration=5m", config=http_config)
        assert amtool(alertd.url, "silence", "query", "-q", config=http_config).split() == [sid.strip()]
        shown = amtool(alertd.url, "config", "show", config=http_config)  # GET /api/v2/status
        assert "receiver: hook" in shown and "group_interval: 1s" in shown and "location: Europe/Berlin" in shown
        assert "127.0.0.1:9" not in shown  # the routing only: no notifier, no URL, no secret


def test_v1_and_v2_share_one_silence_store_and_v2_answers_as_alertmanager(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Served(tmp_path, RULES.format(samples=samples, port=9)) as alertd:
        c = alertd.client
        made = c.post(
            "/api/v1/silences",
            json={"matchers": [{"name": "run", "value": "exp1"}], "duration": "1h", "createdBy": "v1", "comment": "c"},
        )
        sid = made.json()["id"]
        got = c.get(f"/api/v2/silence/{sid}").json()
        assert (got["id"], got["createdBy"], got["status"]["state"]) == (sid, "v1", "active")
        assert got["matchers"] == [{"name": "run", "value": "exp1", "isRegex": False, "isEqual": True}]
        # a POST with the id replaces that silence (amtool's `silence update`)
        body = {k: got[k] for k in ("id", "matchers", "startsAt", "endsAt", "createdBy")} | {"comment": "longer"}
        assert c.post("/api/v2/silences", json=body).json() == {"silenceID": sid}
        assert [(s["id"], s["comment"]) for s in c.get("/api/v1/silences").json()] == [(sid, "longer")]  # in place
        assert [s["id"] for s in c.get("/api/v2/silences", params={"filter": 'run="exp1"'}).json()] == [sid]
        # other matchers: as Alertmanager, that one is expired and a new silence made
        other = dict(body, matchers=[{"name": "run", "value": "exp2", "isRegex": False, "isEqual": True}])
        sid2 = c.post("/api/v2/silences", json=other).json()["silenceID"]
        assert sid2 != sid
        states = {s["id"]: s["status"]["state"] for s in c.get("/api/v2/silences").json()}
        assert states == {sid: "expired", sid2: "active"}
        sid = sid2
        assert c.get("/api/v2/silences", params={"filter": 'run="exp3"'}).json() == []

        unknown = c.get("/api/v2/silence/no-such-id")
        assert unknown.status_code == 404 and unknown.json() == "silence no-such-id not found"
        assert c.delete("/api/v2/silence/no-such-id").status_code == 404
        bad = c.get("/api/v2/silences", params={"filter": 'run="unclosed'})
        assert bad.status_code == 400 and "closing double quote" in bad.json()
        past = dict(body, id=None, endsAt="2020-01-01T00:00:00Z", startsAt="2019-01-01T00:00:00Z")
        refused = c.post("/api/v2/silences", json=past)
        assert refused.status_code == 400 and "end time can't be in the past" in refused.json()
        assert c.delete(f"/api/v2/silence/{sid}").status_code == 200
        assert {s["status"]["state"] for s in c.get("/api/v1/silences").json()} == {"expired"}


ROUTES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
notifiers:
  hook: {{type: webhook, url: "http://127.0.0.1:9/hook?token=SECRET-route-1"}}
  console: {{type: log}}
route:
  receiver: hook
  group_by: [alertname, run]
  routes:
    - {{match: {{severity: critical}}, receivers: [hook, console], continue: true, send_resolved: false}}
    - {{matchers: ['team="ml"'], receiver: console, mute_time_intervals: [nights]}}
time_intervals:
  - name: nights
    time_intervals: [{{times: [{{start_time: "22:00", end_time: "24:00"}}], location: Europe/Berlin}}]
inhibit_rules:
  - {{source_match: {{severity: critical}}, target_match: {{severity: warning}}, equal: [run]}}
rules:
  - {{name: loss_nan, metric: train/loss, condition: nonfinite, severity: critical}}
  - {{name: loss_high, metric: train/loss, condition: "> 10", labels: {{team: ml}}}}
"""


def test_amtool_config_routes_shows_and_tests_alertd_s_routing_tree(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Served(tmp_path, ROUTES.format(samples=samples)) as alertd:
        tree = amtool(alertd.url, "config", "routes")
        assert tree.strip().splitlines() == [
            "Routing tree:",
            ".",
            "└── default-route  receiver: hook",
            '    ├── {severity="critical"}  continue: true  receiver: hook+console',
            '    └── {team="ml"}  receiver: console',
        ]
        test = ("config", "routes", "test", "--verify.receivers=hook+console", "severity=critical")
        assert amtool(alertd.url, *test).split() == ["hook+console"]
        assert amtool(alertd.url, "config", "routes", "test", "severity=warning").split() == ["hook"]
        assert amtool(alertd.url, "config", "routes", "test", "team=ml").split() == ["console"]
        assert alertd.get("/api/v2/receivers").json() == [
            {"name": "hook"},
            {"name": "console"},
            {"name": "hook+console"},
        ]
        assert "SECRET-route-1" not in alertd.get("/api/v2/status").text
