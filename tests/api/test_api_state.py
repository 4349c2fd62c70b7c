"""The read-only endpoints over a real Service served by uvicorn: health, auth, metrics, state, secrets."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from api_helpers import HOOK_TOKEN, make_env, sample_line, serving, wait_for
from prometheus_client.parser import text_string_to_metric_families

from alertd.model import Sample, SeriesKey, make_labels
from alertd.service import Service

pytestmark = pytest.mark.anyio
ALERTD = {"format": "alertd"}
"""The query that asks `/api/v1/alerts` and `/api/v1/rules` for alertd's own shapes."""


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def nan_sample(step: int = 3, run: str = "exp1") -> Sample:
    """A NaN loss, as the source would emit it."""
    return Sample(SeriesKey("train/loss", make_labels({"run": run, "source": "runs"})), time.time(), step, float("nan"))


async def test_health_and_readiness(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, start=False) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["status"] == "not ready"
        r = await client.post("/api/v1/reload", json={})
        assert r.status_code == 503
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        assert (await client.get("/readyz")).status_code == 200


async def test_bearer_token_guards_everything_but_health_and_metrics(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, token="s3cr3t-token") as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await client.get(path)).status_code == 200, path
        for path in ("/api/v1/alerts", "/api/v1/rules", "/api/v1/sources", "/api/v1/series", "/api/v1/silences"):
            r = await client.get(path)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["status"] == "error"
            r = await client.get(path, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401, path
            r = await client.get(path, headers={"Authorization": "Basic s3cr3t-token"})
            assert r.status_code == 401, path
            r = await client.get(path, headers={"Authorization": "Bearer s3cr3t-token"})
            assert r.status_code == 200, path
        r = await client.post("/api/v1/dry-run", json={"rules": "rules: []"})
        assert r.status_code == 401
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        assert (await client.get("/api/v1/alerts")).status_code == 200


async def test_metrics_show_ingestion_alerts_and_deliveries(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        with env.samples.open("a") as f:
            for step, value in enumerate([1.0, 0.9, 0.8]):
                f.write(sample_line("train/loss", value, step, run="exp1"))
        await wait_for(lambda: service.health["runs"].samples == 3, what="3 samples polled")
        service.ingest([nan_sample()], time.time())
        await wait_for(lambda: sum(service.dispatcher.counters.delivered.values()) > 0, what="a delivery")
        r = await client.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        got = metric_values(r.text)
    src = (("source", "runs"),)
    assert got[("alertd_samples_ingested_total", src)] == 3
    assert got[("alertd_source_errors_total", src)] == 0
    assert got[("alertd_source_up", src)] == 1
    assert got[("alertd_source_lag_seconds", src)] >= 0
    assert got[("alertd_buffer_series", ())] == 2  # train/loss and alertd.source.up
    assert got[("alertd_buffer_samples", ())] >= 5
    assert got[("alertd_evaluation_seconds", ())] >= 0
    assert got[("alertd_alerts", (("rule", "loss_nan"), ("state", "firing")))] == 1
    assert got[("alertd_alerts", (("rule", "loss_high"), ("state", "firing")))] == 0
    assert got[("alertd_rule_errors", (("rule", "loss_nan"),))] == 0
    assert got[("alertd_notifications_total", (("outcome", "delivered"), ("receiver", "console")))] >= 1


async def test_alerts_rules_sources_and_series(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        env.samples.write_text(sample_line("train/loss", 0.5, 1, run="exp1"))
        await wait_for(lambda: service.health["runs"].samples == 1, what="1 sample polled")
        assert (await client.get("/api/v1/alerts", params=ALERTD)).json() == []
        service.ingest([nan_sample(step=2)], time.time())

        alerts = (await client.get("/api/v1/alerts", params=ALERTD)).json()
        assert len(alerts) == 1
        a = alerts[0]
        assert (a["rule"], a["state"], a["value"], a["step"], a["severity"]) == (
            "loss_nan",
            "firing",
            "NaN",
            2,
            "critical",
        )
        assert a["labels"] == {"metric": "train/loss", "run": "exp1", "source": "runs"}
        assert a["annotations"] == {"summary": "loss is NaN"}
        assert a["activeAt"].endswith("Z") and a["firedAt"].endswith("Z")
        assert len(a["fingerprint"]) == 16 and a["silenced"] is False

        rules = {r["name"]: r for r in (await client.get("/api/v1/rules", params=ALERTD)).json()}
        assert set(rules) == {"loss_nan", "loss_high"}
        assert rules["loss_nan"]["condition"] == "nonfinite"
        assert rules["loss_nan"]["alerts"] == {"pending": 0, "firing": 1}
        assert rules["loss_nan"]["annotations"] == {"summary": "loss is {{ value }}"}
        assert rules["loss_high"]["condition"] == "> 100"
        assert rules["loss_high"]["metrics"] == ["train/*"]
        assert rules["loss_high"]["labels"] == {"team": "ml"}
        assert rules["loss_high"]["for"] == 0 and rules["loss_high"]["consecutive"] == 1
        assert rules["loss_nan"]["lastEvaluation"].endswith("Z") and rules["loss_nan"]["lastError"] is None

        (src,) = (await client.get("/api/v1/sources")).json()
        assert (src["name"], src["type"], src["interval"], src["up"], src["samples"]) == (
            "runs",
            "samples",
            0.2,
            True,
            1,
        )
        assert src["config"]["path"] == str(env.samples) and src["lastPoll"].endswith("Z")

        listing = (await client.get("/api/v1/series", params={"metric": "train/*"})).json()
        assert listing["total"] == 1
        (s,) = listing["series"]
        assert (s["metric"], s["samples"], s["lastValue"], s["lastStep"]) == ("train/loss", 2, "NaN", 2)
        assert s["labels"] == {"run": "exp1", "source": "runs"}
        everything = (await client.get("/api/v1/series")).json()
        assert {x["metric"] for x in everything["series"]} == {"train/loss", "alertd.source.up"}
        assert len((await client.get("/api/v1/series", params={"limit": 1})).json()["series"]) == 1
        assert (await client.get("/api/v1/series", params={"limit": 0})).status_code == 422

        detail = (await client.get(f"/api/v1/series/{s['id']}")).json()
        assert [x["value"] for x in detail["samples"]] == [0.5, "NaN"]
        assert [x["step"] for x in detail["samples"]] == [1, 2]
        last = (await client.get(f"/api/v1/series/{s['id']}", params={"limit": 1})).json()
        assert [x["value"] for x in last["samples"]] == ["NaN"]
        missing = await client.get("/api/v1/series/0123456789abcdef")
        assert missing.status_code == 404 and missing.json()["status"] == "error"


async def test_alerts_and_rules_in_prometheus_shapes(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    async with serving(Service([str(env.rules)], state=env.state), start=False) as client:
        before = (await client.get("/api/v1/rules")).json()  # never evaluated
        assert {(r["health"], r["state"]) for g in before["data"]["groups"] for r in g["rules"]} == {
            ("unknown", "unknown")
        }
        assert before["data"]["groups"][0]["lastEvaluation"] == "0001-01-01T00:00:00Z"  # Go's zero time
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        now = time.time()
        labels = {"run": "exp1", "source": "runs", "gpu.uuid": "GPU-1"}
        service.ingest([Sample(SeriesKey("train/loss", make_labels(labels)), now, 3, float("nan"))], now)
        service.ingest([Sample(SeriesKey("train/grad_norm", make_labels(labels)), now, 3, 250.0)], now)

        r = await client.get("/api/v1/alerts")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "success" and set(body) == {"status", "data"}
        alerts = {a["labels"]["alertname"]: a for a in body["data"]["alerts"]}
        nan, high = alerts["loss_nan"], alerts["loss_high"]
        assert nan["labels"] == {
            "alertname": "loss_nan",
            "severity": "critical",
            "gpu_uuid": "GPU-1",
            "metric": "train/loss",
            "run": "exp1",
            "source": "runs",
        }
        assert (nan["state"], nan["value"], nan["annotations"]) == ("firing", "NaN", {"summary": "loss is NaN"})
        assert nan["activeAt"].endswith("Z") and set(nan) == {"labels", "annotations", "state", "activeAt", "value"}
        assert (high["value"], high["labels"]["team"], high["labels"]["severity"]) == ("2.5e+02", "ml", "warning")

        r = await client.get("/api/v1/rules")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "success"
        (group,) = body["data"]["groups"]
        assert (group["name"], group["file"], group["interval"], group["limit"]) == ("rules", str(env.rules), 1.0, 0)
        assert group["lastEvaluation"].endswith("Z") and group["evaluationTime"] >= 0
        rules = {x["name"]: x for x in group["rules"]}
        assert list(rules) == ["loss_nan", "loss_high"]  # the file's order
        nan_rule = rules["loss_nan"]
        assert {k: nan_rule[k] for k in ("state", "query", "duration", "keepFiringFor", "health", "type")} == {
            "state": "firing",
            "query": "train/loss nonfinite",
            "duration": 0,
            "keepFiringFor": 0,
            "health": "ok",
            "type": "alerting",
        }
        assert nan_rule["labels"] == {"severity": "critical"}
        assert nan_rule["annotations"] == {"summary": "loss is {{ value }}"}  # the template, as Prometheus shows it
        assert nan_rule["alerts"] == [nan] and "lastError" not in nan_rule  # omitted when none, as Prometheus does
        assert (rules["loss_high"]["query"], rules["loss_high"]["labels"]) == (
            "train/* > 100",
            {"team": "ml", "severity": "warning"},
        )
        # alertd's own shapes stay a query away; an unknown format is a 422 naming it
        assert isinstance((await client.get("/api/v1/alerts", params=ALERTD)).json(), list)
        assert isinstance((await client.get("/api/v1/rules", params=ALERTD)).json(), list)
        for path in ("/api/v1/alerts", "/api/v1/rules"):
            r = await client.get(path, params={"format": "json"})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "format"]


async def test_no_response_holds_a_secret(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    bodies: list[str] = []
    async with serving(service) as client:
        service.ingest([nan_sample()], time.time())
        for path in (
            "/healthz",
            "/readyz",
            "/metrics",
            "/openapi.json",
            "/docs",
            "/api/v1/alerts",
            "/api/v1/rules",
            "/api/v1/sources",
            "/api/v1/series",
            "/api/v1/silences",
        ):
            r = await client.get(path)
            assert r.status_code == 200, path
            bodies.append(r.text)
        rules_text = env.rules.read_text().replace("nonfinite", "bogus")
        r = await client.post("/api/v1/dry-run", json={"rules": rules_text})
        assert r.status_code == 400
        bodies.append(r.text)
    assert HOOK_TOKEN in env.rules.read_text()
    for body in bodies:
        assert HOOK_TOKEN not in body
        assert "/hook?token" not in body


async def test_serve_api_refuses_a_busy_port(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, start=False) as client:
        port = httpx.URL(str(client.base_url)).port
        from alertd.api import serve_api

        with pytest.raises(OSError, match="can't listen on"):
            await serve_api(service, f"127.0.0.1:{port}")
        assert (await client.get("/healthz")).status_code == 200


async def test_runs_lists_each_run_with_its_state_and_end(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        now = time.time()
        labels = {"run": "exp1", "source": "runs"}
        service.ingest([Sample(SeriesKey("train/loss", make_labels(labels)), now - 5, 10, 2.0)], now)
        service.ingest([Sample(SeriesKey("train/loss", make_labels({**labels, "run": "exp2"})), now, 7, 1.0)], now)
        service.ingest([Sample(SeriesKey("run.crashed", make_labels(labels)), now, None, 1.0)], now)
        r = await client.get("/api/v1/runs")
        assert r.status_code == 200
        runs = {x["run"]: x for x in r.json()}
        assert runs["exp1"]["state"] == "ended" and runs["exp1"]["reason"] == "crashed"
        assert runs["exp1"]["lastStep"] == 10 and runs["exp1"]["endedAt"] is not None
        assert runs["exp2"]["state"] == "running" and runs["exp2"]["reason"] is None
        assert runs["exp2"]["firstStep"] == 7 and runs["exp2"]["writer"] is None


async def test_an_action_report_lands_on_its_run_in_runs(tmp_path: Path) -> None:
    from alertd.actions.inprocess import CommandReport
    from alertd.actions.recover import RecoverReport

    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        now = time.time()
        labels = make_labels({"run": "exp1", "source": "runs"})
        service.ingest([Sample(SeriesKey("train/loss", labels), now, 40, float("nan"))], now)
        (alert,) = [a for a in service._alerts().values() if a.rule == "loss_nan"]
        ack = CommandReport("lr_scale", "cut", alert.fingerprint, "loss_nan", acked=True, step=41)
        ack = replace(ack, old_lr=1e-3, new_lr=5e-4, path="/x/alertd-command.cmd", stamp="1")
        await service.receivers.report(ack)
        why = "alertd restarts only a run it started"
        await service.receivers.report(RecoverReport("back", alert.fingerprint, "loss_nan", refused=why))
        await service.receivers.report(CommandReport("save", "keep", "no-such-alert", "loss_nan", refused="x"))
        for i in range(25):  # at most 20 kept, the newest
            await service.receivers.report(replace(ack, step=100 + i, stamp=str(i)))
        r = await client.get("/api/v1/runs")
    (run,) = [x for x in r.json() if x["run"] == "exp1"]
    actions = run["actions"]
    assert len(actions) == 20 and [a["step"] for a in actions] == list(range(105, 125))
    service2 = Service([str(env.rules)], state=tmp_path / "state2")
    async with serving(service2) as client:
        now = time.time()
        service2.ingest([Sample(SeriesKey("train/loss", labels), now, 40, float("nan"))], now)
        (alert,) = [a for a in service2._alerts().values() if a.rule == "loss_nan"]
        await service2.receivers.report(replace(ack, fingerprint=alert.fingerprint))
        await service2.receivers.report(RecoverReport("back", alert.fingerprint, "loss_nan", refused=why))
        (run,) = [x for x in (await client.get("/api/v1/runs")).json() if x["run"] == "exp1"]
    first, second = run["actions"]
    assert (first["action"], first["notifier"], first["rule"], first["refused"]) == (
        "lr_scale",
        "cut",
        "loss_nan",
        None,
    )
    assert (first["step"], first["old_lr"], first["new_lr"], first["acked"]) == (41, 1e-3, 5e-4, True)
    assert "scaled its LR 0.001 -> 0.0005 at step 41" in first["summary"]
    assert first["time"].endswith("Z")
    assert (second["action"], second["refused"], second["phase"]) == ("recover", why, "planned")
    assert "REFUSED" in second["summary"]
