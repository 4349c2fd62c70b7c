"""End to end: a name UTF-8 can't carry (a run directory or a log file named with byte 0xff, a lone surrogate in a
samples line or in a Prometheus answer) is escaped where it enters, and never stops the alerting of the other runs.

Each case runs alertd as a real process, with its HTTP API, beside a real webhook receiver: the bad name's own
NaN fires under its escaped name, an ordinary run's NaN is delivered within 5 s, before and after a restart, and
`/metrics` and the API lists answer 200 showing the escaped name.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver, free_port
from alertd.testing.tbwriter import scalar_record

PROM_TESTKIT = Path(__file__).parents[1] / "prometheus_source"

RULES = """
sources: [{source}]
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route: {{receivers: [hook], group_by: [run], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}}
rules:
  - name: loss_not_finite
    metric: loss
    condition: nonfinite
    annotations: {{summary: "{{{{ labels.run }}}}: loss is {{{{ value }}}}"}}
"""
DELIVERY = 5.0
"""Seconds within which an ordinary run's NaN must reach the receiver."""
LISTS = ("/api/v1/alerts", "/api/v1/alerts?format=alertd", "/api/v1/rules", "/api/v1/sources", "/api/v1/runs")
LISTS += ("/api/v1/series", "/api/v1/silences", "/api/v2/alerts", "/api/v2/status")


@dataclass
class Case:
    """One kind of bad name: the source entry reading it, the `run` label it must show, and how the ordinary
    run `ok` of the same source logs its next loss."""

    source: str
    bad_run: str
    ok_run: str
    log_ok: Callable[[int, float], None]


def _tensorboard(tmp: Path, stack: ExitStack) -> Case:
    logdir = tmp / "logs"
    bad = os.fsencode(logdir) + b"/bad\xff"  # os.listdir gives it back as 'bad\udcff'
    os.makedirs(bad)
    records = [scalar_record("loss", v, step) for step, v in enumerate((1.0, math.nan))]
    with open(bad + b"/events.out.tfevents.1700000000.node.1.0", "wb") as f:
        f.write(b"".join(records))
    (logdir / "ok").mkdir()
    ok = logdir / "ok" / "events.out.tfevents.1700000000.node.2.0"
    ok.touch()

    def log_ok(step: int, value: float) -> None:
        with ok.open("ab") as f:
            f.write(scalar_record("loss", value, step))

    return Case(f'{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}', "bad\\xff", "ok", log_ok)


def _textlog(tmp: Path, stack: ExitStack) -> Case:
    logs = tmp / "logs"
    logs.mkdir()
    with open(os.fsencode(logs) + b"/train\xff.log", "w") as f:
        f.write("step=1 loss=1.0\nstep=2 loss=nan\n")
    ok = logs / "ok.log"
    ok.touch()

    def log_ok(step: int, value: float) -> None:
        with ok.open("a") as f:
            f.write(f"step={step} loss={value}\n")

    source = f'{{name: logs, type: textlog, path: "{logs}/*.log", interval: 0.2s}}'
    return Case(source, "train\\xff.log", "ok.log", log_ok)


def _csv(tmp: Path, stack: ExitStack) -> Case:
    runs = tmp / "csv"
    os.makedirs(os.fsencode(runs) + b"/r\xff")
    with open(os.fsencode(runs) + b"/r\xff/metrics.csv", "w") as f:
        f.write("step,loss\n1,1.0\n2,nan\n")
    (runs / "ok").mkdir()
    ok = runs / "ok" / "metrics.csv"
    ok.write_text("step,loss\n")

    def log_ok(step: int, value: float) -> None:
        with ok.open("a") as f:
            f.write(f"{step},{value}\n")

    return Case(f'{{name: pl, type: csv, path: "{runs}/*/metrics.csv", interval: 0.2s}}', "r\\xff", "ok", log_ok)


def _sample(run: str, step: int, value: float) -> str:
    v = "NaN" if math.isnan(value) else value
    return json.dumps({"metric": "loss", "labels": {"run": run}, "time": time.time(), "step": step, "value": v})


def _samples(tmp: Path, stack: ExitStack) -> Case:
    path = tmp / "samples.jsonl"
    path.write_text(_sample("bad\ud800", 1, 1.0) + "\n" + _sample("bad\ud800", 2, math.nan) + "\n")
    assert "\\ud800" in path.read_text()  # the JSON escape of a lone surrogate, as a writer's json.dumps gives it

    def log_ok(step: int, value: float) -> None:
        with path.open("a") as f:
            f.write(_sample("ok", step, value) + "\n")

    return Case(f'{{name: s, type: samples, path: "{path}", interval: 0.2s}}', "bad\\ud800", "ok", log_ok)


def _prometheus(tmp: Path, stack: ExitStack) -> Case:
    sys.path.insert(0, str(PROM_TESTKIT))
    try:
        from prom_testkit import Reply, Seen, scripted
    finally:
        sys.path.remove(str(PROM_TESTKIT))
    ok_value = [1.0]

    def answer(seen: Seen) -> Reply:
        result = [
            {"metric": {"__name__": "loss", "run": "bad\ud800"}, "value": [time.time(), "NaN"]},
            {"metric": {"__name__": "loss", "run": "ok"}, "value": [time.time(), _prom_value(ok_value[0])]},
        ]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
        assert "\\ud800" in body
        return Reply(200, body.encode())

    server = stack.enter_context(scripted(answer))

    def log_ok(step: int, value: float) -> None:
        ok_value[0] = value

    source = f'{{name: prom, type: prometheus, url: "{server.url}", interval: 0.2s, queries: [{{query: loss}}]}}'
    return Case(source, "bad\\ud800", "ok", log_ok)


def _prom_value(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(value)


CASES = {
    "tensorboard run directory bad\\xff": _tensorboard,
    "text log train\\xff.log": _textlog,
    "csv directory r\\xff": _csv,
    "samples label with a lone surrogate": _samples,
    "prometheus answer with a lone surrogate": _prometheus,
}


@contextmanager
def _service(rules: Path, state: Path, port: int) -> Iterator[Alertd]:
    alertd = Alertd(rules, state, "--listen", f"127.0.0.1:{port}")
    try:
        yield alertd
    finally:
        alertd.stop(signal.SIGKILL)


def _bodies(receiver: Receiver, run: str, status: str) -> list[dict]:  # type: ignore[type-arg]
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [b for b in bodies if b["status"] == status and b["alerts"][0]["labels"]["run"] == run]


def _firing(receiver: Receiver, run: str) -> list[dict]:  # type: ignore[type-arg]
    return _bodies(receiver, run, "firing")


def _episode(case: Case, receiver: Receiver, alertd: Alertd, step: int) -> None:
    """The ordinary run logs a finite loss (an alert of it firing resolves, and the receiver is told), then a
    NaN: its firing reaches the receiver within DELIVERY s."""
    before = len(_firing(receiver, case.ok_run))
    case.log_ok(step, 1.0)
    if before:  # a new episode is told once its group has told the end of the last (within one group_interval,
        # a resolution and a new firing of one alert are one firing alert, as Alertmanager has it)
        wait_for(lambda: _bodies(receiver, case.ok_run, "resolved"), "the resolution", 15, alertd)
    else:
        time.sleep(0.5)
    case.log_ok(step + 1, math.nan)
    logged = time.monotonic()
    wait_for(lambda: len(_firing(receiver, case.ok_run)) > before, f"the NaN of run {case.ok_run}", 15, alertd)
    took = time.monotonic() - logged
    assert took < DELIVERY, f"the NaN of the ordinary run took {took:.1f}s to arrive"


def _answers(port: int, bad_run: str, *, runs: bool = True) -> None:
    """/metrics and every list answer 200; the alerts, the series and (`runs`: before a restart, which forgets the
    runs until they write again) the runs show the bad name escaped."""
    base = f"http://127.0.0.1:{port}"
    for path in ("/metrics", *LISTS):
        resp = httpx.get(base + path, timeout=10)
        assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text[:300]}"
    alerts = httpx.get(base + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    assert bad_run in {a["labels"]["run"] for a in alerts}
    series = httpx.get(base + "/api/v1/series?metric=loss", timeout=10).json()["series"]
    assert bad_run in {s["labels"]["run"] for s in series}
    if runs:
        assert bad_run in {r["run"] for r in httpx.get(base + "/api/v1/runs", timeout=10).json()}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_bad_name_is_escaped_and_the_other_runs_nan_is_delivered_across_a_restart(tmp_path: Path, kind: str) -> None:
    receiver = Receiver()
    with ExitStack() as stack:
        stack.callback(receiver.stop)
        case = CASES[kind](tmp_path, stack)
        rules = tmp_path / "rules.yaml"
        rules.write_text(RULES.format(source=case.source, url=receiver.url))
        state, port = tmp_path / "state", free_port()
        with _service(rules, state, port) as alertd:
            (bad,) = wait_for(lambda: _firing(receiver, case.bad_run), "the bad name's own NaN", 20, alertd)
            assert bad["alerts"][0]["annotations"]["summary"] == f"{case.bad_run}: loss is NaN"
            _episode(case, receiver, alertd, 10)
            _answers(port, case.bad_run)
            assert alertd.stop() == 0
            assert "Traceback" not in alertd.logs()
        with _service(rules, state, port) as again:
            again.wait_log("state restored")
            _episode(case, receiver, again, 20)
            _answers(port, case.bad_run, runs=False)
            time.sleep(0.5)
            assert again.stop() == 0
            assert "Traceback" not in again.logs()
    assert len(_firing(receiver, case.bad_run)) == 1  # not sent again after the restart
    assert len(_firing(receiver, case.ok_run)) == 2
