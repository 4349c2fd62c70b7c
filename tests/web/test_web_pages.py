"""The web pages in a real browser: Debian's chromium driven by Playwright, against a live alertd whose run is
written during the test. Every request the page makes must go to alertd itself (no CDN, no network).
Screenshots are saved under `test-artifacts/web/` (or $ALERTD_ARTIFACTS)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.tbwriter import ScalarWriter

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
TOKEN = "page-token-7f3a91"
ARTIFACTS = Path(os.environ.get("ALERTD_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts") / "web"

RULES = """
sources:
  - {{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}
  - {{name: gpu, type: nvml, interval: 1s}}
notifiers: {{console: {{type: log}}, back: {{type: recover}}}}
route:
  receivers: [console]
  group_wait: 0s
  repeat_interval: 4h
  routes: [{{matchers: ['alertname="loss_not_finite"'], receivers: [console, back]}}]
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical,
      annotations: {{summary: "{{{{ metric }}}} is {{{{ value }}}} at step {{{{ step }}}}"}}}}
  - {{name: grad_norm_exploding, metric: ["*grad_norm"], condition: "> 100", severity: warning}}
"""

DRY_RULES = """rules:
  - {name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}
"""


RECOVER_RULES = """notifiers:
  back: {type: recover, rollback: 5}
route: {receivers: [back]}
rules:
  - {name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, token: str = TOKEN) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _write_run(logdir: Path, nan_step: int = 30, steps: int = 45) -> None:
    w = ScalarWriter(logdir / "exp1")
    t0 = time.time() - steps * 2
    for step in range(steps):
        loss = math.nan if step == nan_step else 3.0 * math.exp(-step / 20) + 0.3
        w.add_scalar("train/loss", loss, step, wall_time=t0 + 2 * step)
        w.add_scalar("train/grad_norm", 150.0 if step == 12 else 1.0 + step / 100, step, wall_time=t0 + 2 * step)
        w.add_scalar("train/learning_rate", 1e-4, step, wall_time=t0 + 2 * step)
    w.flush()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (the web tests drive a real browser)")
    root = tmp_path_factory.mktemp("web")
    logdir, recorded = root / "runs", root / "recorded"
    logdir.mkdir()
    _write_run(recorded)  # a past run for the dry-run page, under the allowed root
    rules = root / "rules.yaml"
    rules.write_text(RULES.format(logdir=logdir))
    port = _free_port()
    no_driver = root / "no-driver"  # an unloadable libnvidia-ml.so.1 first on the path: NVML is missing on any box
    no_driver.mkdir()
    (no_driver / "libnvidia-ml.so.1").write_bytes(b"")
    env = {"ALERTD_API_TOKEN": TOKEN, "ALERTD_DRY_RUN_ROOTS": str(recorded), "LD_LIBRARY_PATH": str(no_driver)}
    alertd = Alertd(rules, root / "state", "--listen", f"127.0.0.1:{port}", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        alertd.wait_log("alertd started", 30)
        _write_run(logdir, steps=31)  # the live run, written while alertd watches: it ends on the NaN

        def firing() -> bool:
            alerts = _get(f"{base}/api/v1/alerts?format=alertd")
            return any(a["rule"] == "loss_not_finite" and a["state"] == "firing" for a in alerts)

        wait_for(firing, "the NaN alert to fire", 30, alertd)
        yield {"base": base, "alertd": alertd, "recorded": recorded}
    finally:
        alertd.stop(signal.SIGTERM)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-domain-reliability",
                "--disable-sync",
                "--proxy-server=http://127.0.0.1:9",  # nothing but alertd (bypassed below) can be reached
                "--proxy-bypass-list=127.0.0.1",
            ],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, site: dict[str, Any]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    foreign: list[str] = []
    context.on("request", lambda r: None if r.url.startswith(site["base"]) else foreign.append(r.url))
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert foreign == [], f"the page asked for something outside alertd: {foreign}"
    assert errors == [], f"script errors on the page: {errors}"


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def login(page: Any, base: str, path: str = "/ui/") -> None:
    page.goto(base + path)
    page.locator("#token").fill(TOKEN)
    page.locator("#login-form button[type=submit]").click()


def test_without_the_token_the_page_stays_empty(page: Any, site: dict[str, Any]) -> None:
    page.goto(site["base"] + "/")  # redirected to /ui/
    page.locator("#login").wait_for(state="visible")
    assert page.url.endswith("/ui/")
    assert page.locator("#content").inner_text() == ""
    assert "loss_not_finite" not in page.content()
    page.locator("#token").fill("not-the-token")
    page.locator("#login-form button[type=submit]").click()
    page.locator("#login-error").filter(has_text="refused").wait_for()
    assert "loss_not_finite" not in page.content()
    shot(page, "login")


def test_the_overview_lists_the_firing_alert_its_run_and_the_sources(page: Any, site: dict[str, Any]) -> None:
    login(page, site["base"])
    row = page.locator('#alerts tr[data-rule="loss_not_finite"][data-state="firing"]')
    row.wait_for()
    text = row.inner_text()
    assert "critical" in text and "train/loss is NaN at step 30" in text and "30" in text
    assert page.locator('#runs tr[data-run="exp1"][data-source="tb"]').inner_text().count("exp1") >= 1
    assert "up" in page.locator('#sources tr[data-source="tb"]').inner_text()
    gpu = page.locator('#sources tr[data-source="gpu"]').inner_text()
    assert "disabled" in gpu and "libnvidia-ml.so.1 not found" in gpu and "up" not in gpu.split()
    # Live: a new alert appears without a reload.
    w = ScalarWriter(Path(site["alertd"].log_path).parent / "runs" / "exp2")
    w.add_scalar("train/grad_norm", 500.0, 1)
    w.flush()
    page.locator('#alerts tr[data-rule="grad_norm_exploding"]').filter(has_text="exp2").wait_for(timeout=20_000)
    shot(page, "overview")


def test_the_run_page_draws_the_curves_with_the_alert_span_over_the_firing_step(
    page: Any, site: dict[str, Any]
) -> None:
    login(page, site["base"])
    page.locator('#runs a:text-is("exp1")').first.click()
    panel = page.locator('#chart g.panel[data-metric="train/loss"]')
    panel.wait_for()
    span = panel.locator('rect.span.firing[data-rule="loss_not_finite"]')
    assert span.get_attribute("data-step") == "30"
    nan = panel.locator('g.nonfinite[data-kind="NaN"]')
    assert nan.get_attribute("data-step") == "30"  # the NaN is marked, not dropped
    box, mark = span.bounding_box(), nan.bounding_box()
    assert box is not None and mark is not None
    assert box["x"] - 1 <= mark["x"] + mark["width"] / 2 <= box["x"] + box["width"] + 1  # the span covers it
    for metric in ("train/grad_norm", "train/learning_rate"):
        assert page.locator(f'#chart g.panel[data-metric="{metric}"] path.line').count() == 1
    assert page.locator("#run-state-value").inner_text().startswith("running")
    assert panel.get_attribute("data-axis") == "step"  # over the training step by default
    assert panel.locator("text.axis").text_content() == "step"
    shot(page, "run")
    page.locator("#x-time").click()  # the same run over time
    by_time = page.locator('#chart g.panel[data-metric="train/loss"][data-axis="time"]')
    by_time.wait_for()
    assert by_time.locator("text.axis").text_content() == "time"
    assert page.locator("#x-time").evaluate("e => e.tagName") == "STRONG"


def test_a_silence_made_from_the_page_silences_the_alert(page: Any, site: dict[str, Any]) -> None:
    login(page, site["base"])
    row = page.locator('#alerts tr[data-rule="loss_not_finite"]').filter(has_text="exp1")
    row.get_by_role("link", name="Silence").click()
    page.locator("#matchers").wait_for()
    matchers = page.locator("#matchers").input_value()
    assert 'alertname="loss_not_finite"' in matchers and 'run="exp1"' in matchers
    page.locator("#comment").fill("looking into it")
    page.get_by_role("button", name="Create silence").click()
    page.locator('#silence-list tr:has-text("looking into it") td.status-active').wait_for()
    alert = next(a for a in _get(site["base"] + "/api/v1/alerts?format=alertd") if a["rule"] == "loss_not_finite")
    assert alert["silenced"] is True
    shot(page, "silences")
    page.goto(site["base"] + "/ui/")
    page.locator('#alerts tr[data-rule="loss_not_finite"]:has-text("silenced")').wait_for()
    # expire it again from the page
    page.goto(site["base"] + "/ui/silences")
    page.locator('#silence-list tr:has-text("looking into it")').get_by_role("button", name="Expire").click()
    page.locator('#silence-list tr:has-text("looking into it") td.status-expired').wait_for()


def test_the_dry_run_page_shows_the_rule_firing_at_the_step_of_the_data(page: Any, site: dict[str, Any]) -> None:
    login(page, site["base"], "/ui/dry-run")
    page.locator("select#source").wait_for()
    page.locator("#rules").fill(DRY_RULES)
    page.locator("select#source").select_option(label=f"tensorboard: {site['recorded'] / 'exp1'}")
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Run").click()
    row = page.locator('#dry-result tr[data-rule="loss_not_finite"][data-state="firing"]')
    row.wait_for(timeout=30_000)
    assert row.get_attribute("data-step") == "30"
    span = page.locator('#dry-result g.panel[data-metric="train/loss"] rect.span.firing')
    assert span.get_attribute("data-step") == "30"
    shot(page, "dry-run")


def test_the_run_page_lists_what_the_actions_did(page: Any, site: dict[str, Any]) -> None:
    login(page, site["base"])
    page.locator('#runs a:text-is("exp1")').first.click()
    row = page.locator('#run-actions tr[data-action="recover"][data-notifier="back"]')
    row.first.wait_for(timeout=20_000)  # alertd runs no `exec` here: the recovery is refused, and said so
    assert row.first.get_attribute("data-refused") == "true"
    assert "REFUSED: alertd restarts only a run it started" in row.first.inner_text()
    (run,) = [r for r in _get(site["base"] + "/api/v1/runs") if r["run"] == "exp1"]
    assert run["actions"][-1]["action"] == "recover" and run["actions"][-1]["notifier"] == "back"
    shot(page, "run-actions")


def test_the_dry_run_page_shows_the_recovery_plan(page: Any, site: dict[str, Any]) -> None:
    rec = site["recorded"] / "rec"
    rec.mkdir(exist_ok=True)
    t0 = time.time() - 3600
    with (rec / "run.jsonl").open("w") as f:
        for step in range(60):
            value = "NaN" if step == 40 else 3.0 * math.exp(-step / 20) + 0.3
            line = {"metric": "train/loss", "labels": {"run": "r1"}, "time": t0 + step, "step": step, "value": value}
            f.write(json.dumps(line) + "\n")
    ledger = [
        {"step": s, "path": f"/out/checkpoint-{s}", "time": t0 + s, "finite": True, "saved": True} for s in (10, 20, 30)
    ]
    (rec / "alertd-checkpoints.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ledger))
    login(page, site["base"], "/ui/dry-run")
    page.locator("select#source").wait_for()
    page.locator("#rules").fill(RECOVER_RULES)
    page.locator("select#source").select_option(label=f"samples: {rec / 'run.jsonl'}")
    page.get_by_role("button", name="Run").click()
    row = page.locator('#dry-recoveries tr[data-notifier="back"]')
    row.wait_for(timeout=30_000)
    assert row.get_attribute("data-checkpoint-step") == "30" and row.get_attribute("data-step") == "40"
    assert "attempt 2: back to /out/checkpoint-30 (step 30), updates 31-41 skipped, LR x0.5" in row.inner_text()
    panel = page.locator('#dry-result g.panel[data-metric="train/loss"]')
    mark = panel.locator('g.recovery[data-notifier="back"]')
    assert mark.locator("line.recovery-checkpoint").get_attribute("data-step") == "30"
    band = mark.locator("rect.recovery-skip")
    assert (band.get_attribute("data-from"), band.get_attribute("data-to")) == ("31", "41")
    assert "back to 30" in mark.locator("text.recovery-label").text_content()
    line, box = mark.locator("line.recovery-checkpoint").bounding_box(), band.bounding_box()
    assert line is not None and box is not None and line["x"] < box["x"]  # the checkpoint before the skipped updates
    shot(page, "dry-run-recovery")


def test_a_phone_and_the_keyboard_alone_are_enough(browser: Any, site: dict[str, Any]) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        page.goto(site["base"] + "/ui/")
        page.locator("#token").wait_for(state="visible")
        page.keyboard.type(TOKEN)  # the prompt has the focus: type, Enter
        page.keyboard.press("Enter")
        page.locator('#alerts tr[data-rule="loss_not_finite"]').first.wait_for()
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 390, f"the page is {wide}px wide on a 390px phone"  # wide tables scroll in their box
        for _ in range(12):  # Tab reaches the run's link; Enter follows it
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent") == "exp1":
                break
        page.keyboard.press("Enter")
        page.locator('#chart g.panel[data-metric="train/loss"]').wait_for()
        shot(page, "phone-run")
    finally:
        context.close()
