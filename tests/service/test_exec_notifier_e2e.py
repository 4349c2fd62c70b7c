"""The exec notifier through the real service: a NaN in a samples file runs the program with the
notification on stdin; a first run that exits 75 (EX_TEMPFAIL) is retried by the delivery pipeline."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from service_helpers import Alertd, wait_for

SECRET = "tok-e2e-secret-0042"

HOOK = """
import json, os, sys
out = sys.argv[1]
n = len(os.listdir(out))
body = json.loads(sys.stdin.read())
with open(os.path.join(out, f"run{n}.json"), "w") as f:
    json.dump({"body": body, "status": os.environ["ALERTD_STATUS"], "rule": os.environ["ALERTD_RULE"],
               "token": os.environ["TOKEN"] == "SECRET"}, f)
if n == 0:
    print("busy, token", os.environ["TOKEN"], file=sys.stderr)
    sys.exit(75)
""".replace("SECRET", SECRET)

RULES = """
sources:
  - {{name: s, type: samples, path: "{samples}", interval: 0.2s}}
notifiers:
  hook: {{type: exec, command: ["{python}", "{hook}", "{out}"], timeout: 10s, env: {{TOKEN: "{secret}"}}}}
route: {{receivers: [hook], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: loss, condition: nonfinite, severity: critical}}
"""


def test_a_nan_runs_the_program_and_exit_75_is_retried(tmp_path: Path) -> None:
    samples, out, hook = tmp_path / "s.jsonl", tmp_path / "out", tmp_path / "hook.py"
    samples.touch()
    out.mkdir()
    hook.write_text(HOOK)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(samples=samples, python=sys.executable, hook=hook, out=out, secret=SECRET))
    alertd = Alertd(rules, tmp_path / "state")
    try:
        time.sleep(1.0)
        line = {"metric": "loss", "labels": {"run": "a"}, "time": time.time(), "step": 7, "value": "NaN"}
        samples.write_text(json.dumps(line) + "\n")
        wait_for(lambda: (out / "run1.json").exists(), "the retried run", 60.0, alertd)
    finally:
        alertd.stop()
    first, second = (json.loads((out / f"run{i}.json").read_text()) for i in (0, 1))
    assert first["body"] == second["body"]  # the same notification, delivered on the second try
    body = second["body"]
    assert body["status"] == "firing" and body["version"] == "4"
    assert [a["labels"]["alertname"] for a in body["alerts"]] == ["loss_not_finite"]
    assert body["alerts"][0]["labels"]["run"] == "a"
    assert second["status"] == "firing" and second["rule"] == "loss_not_finite" and second["token"]
    logs = alertd.logs()
    assert "exit status 75 (retryable)" in logs and "busy, token" in logs
    assert SECRET not in logs
