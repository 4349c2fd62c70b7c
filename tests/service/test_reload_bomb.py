"""A YAML alias bomb given to a running alertd on reload (SIGHUP and the API): refused, the old rules
stay and keep alerting, /healthz answers within a second meanwhile, and SIGTERM still ends it."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

from service_helpers import Alertd

from alertd.testing.receiver import free_port

RULES = """
sources: [{{name: s, type: samples, path: "{path}", interval: 0.2s}}]
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""
BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
)


def _get(url: str, method: str = "GET") -> tuple[int, str, float]:
    started = time.monotonic()
    headers = {"Content-Type": "application/json"} if method != "GET" else {}  # a state change is JSON
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), time.monotonic() - started


def test_an_alias_bomb_on_reload_is_refused_and_the_old_rules_keep_alerting(tmp_path: Path) -> None:
    samples, rules, port = tmp_path / "samples.jsonl", tmp_path / "rules.yaml", free_port()
    samples.touch()
    rules.write_text(RULES.format(path=samples))
    base = f"http://127.0.0.1:{port}"
    alertd = Alertd(rules, tmp_path / "state", "--listen", f"127.0.0.1:{port}")
    try:
        alertd.wait_log("alertd started")
        rules.write_text(BOMB)
        alertd.proc.send_signal(signal.SIGHUP)
        health = [_get(f"{base}/healthz")[2] for _ in range(5)]  # while the reload reads the bomb
        alertd.wait_log("reload refused, the running rules stay", 10)
        status, body, took = _get(f"{base}/api/v1/reload", "POST")
        assert status == 400 and "aliases" in body
        assert alertd.logs().count("reload refused, the running rules stay") == 2
        line = {"metric": "loss", "labels": {"source": "s", "run": "a"}, "time": time.time(), "step": 1, "value": "NaN"}
        samples.write_text(json.dumps(line) + "\n")
        alertd.wait_log('"state": "firing"')  # the old rules still run
        stopping = time.monotonic()
        assert alertd.stop() == 0
        assert time.monotonic() - stopping < 10
    finally:
        alertd.stop(signal.SIGKILL)
    assert took < 5 and max(health) < 1.0
