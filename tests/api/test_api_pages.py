"""The pages' server side: the shells and assets (no data, no token needed, a strict CSP), the run plot, the
dry-run listing of the allowed roots, and dry-run plots. The pages themselves run in tests/web."""

from __future__ import annotations

import asyncio
import json
import math
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from api_helpers import make_env, serving
from test_api_dryrun import write_tb

from alertd.service import Service

pytestmark = pytest.mark.anyio
TOKEN = "pages-token-1234"
SVG = "{http://www.w3.org/2000/svg}"


async def test_shells_and_assets_carry_no_data_and_the_data_needs_the_token(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, token=TOKEN) as client:
        r = await client.get("/", follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == "ui/"
        for path in ("/ui/", "/ui/run", "/ui/silences", "/ui/dry-run"):
            r = await client.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert r.headers["x-frame-options"] == "DENY"
            assert '<script src="static/alertd.js" defer></script>' in r.text
            assert TOKEN not in r.text and "http://" not in r.text and "https://" not in r.text
        js = await client.get("/ui/static/alertd.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in js.text and "http://" not in js.text and "https://" not in js.text
        assert (await client.get("/ui/static/alertd.css")).status_code == 200
        assert (await client.get("/ui/static/..%2F..%2Fapp.py")).status_code == 404
        assert (await client.get("/ui/static/routes.py")).status_code == 404
        # the data behind the pages: the token, as for the rest of the API
        assert (await client.get("/api/v1/runs/plot.svg", params={"source": "s", "run": "r"})).status_code == 401
        assert (await client.get("/api/v1/dry-run/sources")).status_code == 401


async def test_the_run_plot_draws_the_buffered_run_and_its_alert_span(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    t0 = time.time() - 20
    lines = [
        {
            "metric": "train/loss",
            "labels": {"run": "r1"},
            "time": t0 + i,
            "step": i,
            "value": "NaN" if i == 6 else 1.0 / (i + 1),
        }
        for i in range(7)
    ]
    async with serving(service) as client:
        env.samples.write_text("".join(json.dumps(x) + "\n" for x in lines))

        async def firing() -> bool:
            r = await client.get("/api/v1/alerts")
            return any(a["state"] == "firing" for a in r.json()["data"]["alerts"])

        deadline = time.monotonic() + 20
        while not await firing():
            assert time.monotonic() < deadline, "the NaN alert never fired"
            await asyncio.sleep(0.1)
        params = {"source": "runs", "run": "r1"}
        r = await client.get("/api/v1/runs/plot.svg", params=params)
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
        root = ET.fromstring(r.text)
        assert root.get("data-run") == "r1"
        (panel,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
        assert panel.get("data-metric") == "train/loss"
        spans = [x for x in panel.iter(f"{SVG}rect") if (x.get("class") or "").startswith("span")]
        assert [(s.get("data-state"), s.get("data-step"), s.get("data-end")) for s in spans] == [("firing", "6", "")]
        nan = [g for g in panel.iter(f"{SVG}g") if g.get("class") == "nonfinite"]
        assert [(g.get("data-kind"), g.get("data-step")) for g in nan] == [("NaN", "6")]
        assert panel.get("data-axis") == "step"  # the training step by default: a log read at once is no line
        ticks = [t.text for t in panel.iter(f"{SVG}text") if (t.get("class") or "").startswith("tick")]
        assert ticks[-1] == "step" and "0" in ticks and "5" in ticks
        by_time = ET.fromstring((await client.get("/api/v1/runs/plot.svg", params={**params, "x": "time"})).text)
        (panel,) = [g for g in by_time.iter(f"{SVG}g") if g.get("class") == "panel"]
        assert panel.get("data-axis") == "time"
        assert [t.text for t in panel.iter(f"{SVG}text") if t.get("class") == "tick axis"] == ["time"]
        refused = await client.get("/api/v1/runs/plot.svg", params={**params, "x": "wall"})
        assert refused.status_code == 422
        empty = await client.get("/api/v1/runs/plot.svg", params={"source": "x", "run": "<nope>"})
        assert empty.status_code == 200 and "no samples for this run" in empty.text and "<nope>" not in empty.text


async def test_the_dry_run_lists_what_it_may_read_and_draws_each_run(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    root = tmp_path / "allowed"
    write_tb(root / "tb" / "run1", [1.0, 2.0, math.nan, 1.0])
    (root / "logs").mkdir()
    (root / "logs" / "train.log").write_text("step=1 loss=2.0\n")
    (root / "metrics.csv").write_text("step,loss\n1,2.0\n")
    (root / "mlruns").mkdir()
    (root / "outside-link").symlink_to("/etc")
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:
        listing = (await client.get("/api/v1/dry-run/sources")).json()
        assert listing["roots"] == [str(root)]
        assert sorted((s["type"], s["path"]) for s in listing["sources"]) == [
            ("csv", str(root / "metrics.csv")),
            ("mlflow", str(root / "mlruns")),
            ("tensorboard", str(root / "tb" / "run1")),
            ("textlog", str(root / "logs" / "train.log")),
        ]
        rules = "rules: [{name: loss_not_finite, metric: train/loss, condition: nonfinite, severity: critical}]"
        body = {"rules": rules, "source": {"type": "tensorboard", "path": str(root / "tb" / "run1")}, "plot": True}
        out = (await client.post("/api/v1/dry-run", json=body)).json()
        assert [(t["state"], t["step"]) for t in out["transitions"]] == [("firing", 2), ("resolved", 3)]
        # the logdir's own event files: the run is named by the directory, as the callbacks name it, not "."
        assert {t["labels"]["run"] for t in out["transitions"]} == {"run1"}
        (plot,) = out["plots"]
        assert (plot["source"], plot["run"]) == ("dry-run", "run1")
        svg = ET.fromstring(plot["svg"])
        assert svg.findtext(f"{SVG}title") == "run1 (dry-run)"
        spans = [x for x in svg.iter(f"{SVG}rect") if (x.get("class") or "").startswith("span")]
        assert [(s.get("data-rule"), s.get("data-state"), s.get("data-step")) for s in spans] == [
            ("loss_not_finite", "firing", "2")
        ]
        without = (await client.post("/api/v1/dry-run", json={**body, "plot": False})).json()
        assert "plots" not in without
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        assert (await client.get("/api/v1/dry-run/sources")).json() == {"roots": [], "sources": []}


async def test_a_logdir_s_root_run_is_shown_by_the_directory_s_name(tmp_path: Path) -> None:
    write_tb(tmp_path / "gpt-small", [1.0, 2.0, math.nan])  # event files right in the logdir: run "."
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        f"sources: [{{name: tb, type: tensorboard, logdir: '{tmp_path / 'gpt-small'}', interval: 0.1s}}]\n"
    )
    service = Service([str(rules)], state=tmp_path / "state")
    async with serving(service) as client:
        deadline = time.monotonic() + 20
        while not (runs := (await client.get("/api/v1/runs")).json()):
            assert time.monotonic() < deadline, "the run never showed"
            await asyncio.sleep(0.1)
        assert [(r["source"], r["run"], r["title"]) for r in runs] == [("tb", ".", "gpt-small")]
        svg = ET.fromstring((await client.get("/api/v1/runs/plot.svg", params={"source": "tb", "run": "."})).text)
        assert svg.findtext(f"{SVG}title") == "gpt-small (tb)"
