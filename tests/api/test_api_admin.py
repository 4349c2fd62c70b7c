"""Silences, reload, and a schemathesis run over /openapi.json against the real server."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
from api_helpers import make_env, serving, write_rules

from alertd.model import Sample, SeriesKey, make_labels
from alertd.service import Service

pytestmark = pytest.mark.anyio
ALERTD = {"format": "alertd"}


async def test_silences_create_list_mute_and_expire(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        key = SeriesKey("train/loss", make_labels({"run": "exp1", "source": "runs"}))
        service.ingest([Sample(key, time.time(), 1, float("nan"))], time.time())
        body = {
            "matchers": [{"name": "rule", "value": "loss_nan"}, {"name": "run", "value": "exp.*", "isRegex": True}],
            "duration": "1h",
            "createdBy": "alice",
            "comment": "known NaN",
        }
        r = await client.post("/api/v1/silences", json=body)
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
        (s,) = (await client.get("/api/v1/silences")).json()
        assert (s["id"], s["createdBy"], s["comment"], s["status"]) == (sid, "alice", "known NaN", {"state": "active"})
        assert s["matchers"][1] == {"name": "run", "value": "exp.*", "isRegex": True, "isEqual": True}
        (alert,) = (await client.get("/api/v1/alerts", params=ALERTD)).json()
        assert alert["silenced"] is True and alert["silencedBy"] == [sid]

        r = await client.delete(f"/api/v1/silences/{sid}")
        assert r.status_code == 200 and r.json()["status"] == {"state": "expired"}
        (s,) = (await client.get("/api/v1/silences")).json()
        assert s["status"] == {"state": "expired"}
        assert (await client.get("/api/v1/alerts", params=ALERTD)).json()[0]["silenced"] is False
        assert (await client.delete("/api/v1/silences/nope")).status_code == 404

        later = {"matchers": [{"name": "team", "value": "ml", "isEqual": False}], "startsAt": "2100-01-01T00:00:00Z"}
        r = await client.post("/api/v1/silences", json={**later, "endsAt": "2100-01-02T00:00:00Z"})
        assert r.status_code == 200
        states = {x["id"]: x["status"]["state"] for x in (await client.get("/api/v1/silences")).json()}
        assert states[r.json()["id"]] == "pending"

        bad = [
            ({"matchers": [], "duration": "1h"}, 422),
            ({"matchers": [{"name": "run", "value": "(", "isRegex": True}], "duration": "1h"}, 400),
            ({"matchers": [{"name": "run", "value": "x"}]}, 400),
            ({"matchers": [{"name": "run", "value": "x"}], "duration": "1h", "endsAt": "2100-01-01T00:00:00Z"}, 400),
            ({**later, "endsAt": "2099-12-31T00:00:00Z"}, 400),
            ({"matchers": [{"name": "run", "value": "x"}], "duration": "soon"}, 400),
            ({"matchers": [{"name": "bad name", "value": "x"}], "duration": "1h"}, 422),
        ]
        for payload, status in bad:
            r = await client.post("/api/v1/silences", json=payload)
            assert r.status_code == status, (payload, r.text)
        assert len((await client.get("/api/v1/silences")).json()) == 2
    # Silences are kept in the state directory: a new service sees them.
    again = Service([str(env.rules)], state=env.state)
    assert {s.id for s in again.silences.list()} >= {sid}
    again.silences.close()
    again.outbox.close()


async def test_reload_good_and_bad_rules(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        write_rules(env.rules, env.samples, extra="  - {name: acc_low, metric: eval/acc, condition: '< 0.1'}\n")
        r = await client.post("/api/v1/reload", json={})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "ok"
        names = {x["name"] for x in (await client.get("/api/v1/rules", params=ALERTD)).json()}
        assert names == {"loss_nan", "loss_high", "acc_low"}

        write_rules(env.rules, env.samples, extra="  - {name: broken, metric: m, condition: 'sometimes'}\n")
        r = await client.post("/api/v1/reload", json={})
        assert r.status_code == 400
        out = r.json()
        assert out["status"] == "error"
        assert any("rules[2].condition" in e and "unknown condition" in e for e in out["errors"]), out
        (group,) = (await client.get("/api/v1/rules")).json()["data"]["groups"]
        assert {x["name"] for x in group["rules"]} == {"loss_nan", "loss_high", "acc_low"}  # the old rules keep running


async def test_schemathesis_finds_no_server_error(tmp_path: Path) -> None:
    cli = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    env = make_env(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:
        spec = (await client.get("/openapi.json")).json()
        operations = sum(len(methods) for methods in spec["paths"].values())
        assert operations >= 20  # v1, the admin routes and Alertmanager's API v2
        proc = await asyncio.create_subprocess_exec(
            cli,
            "run",
            f"{client.base_url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            "--phases",
            "examples,coverage,fuzzing",
            "--seed",
            "1",
            "--no-color",
            "--generation-database",
            "none",
            "--request-timeout",
            "20",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert f"Tested: {operations}" in text and "Fuzzing" in text, text[-3000:]
