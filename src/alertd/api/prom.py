"""`GET /api/v1/alerts` and `GET /api/v1/rules` in Prometheus' shapes (`web/api/v1/api.go`), so that what
reads a Prometheus server's alerts and rules (Grafana, scripts, `promtool`-minded tooling) reads alertd's.

`{"status": "success", "data": {"alerts": [...]}}`: each alert's labels (its own, `alertname`, `severity`;
names as Prometheus writes them, `gpu.uuid` -> `gpu_uuid`), annotations, state, `activeAt` and `value` as
Go's `strconv.FormatFloat(v, 'e', -1, 64)` writes it (`1e+00`, `NaN`, `+Inf`).

`{"status": "success", "data": {"groups": [...]}}`: one group per rules file (its name the file's stem),
each rule as an alerting rule: `query` is alertd's own description of what it watches and when it holds
(not PromQL), `duration` its `for`, `health` ok, err or unknown (before the first evaluation).
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from alertd.api.models import time_or_none
from alertd.api.view import AlertsView
from alertd.model import Alert, am_labels
from alertd.promnames import prom_labels

ZERO_TIME = "0001-01-01T00:00:00Z"
"""Go's zero `time.Time` as JSON: Prometheus' `lastEvaluation` before any evaluation."""


def go_float(value: float) -> str:
    """`value` as Go's `strconv.FormatFloat(value, 'e', -1, 64)`: the shortest digits that read back the same,
    in exponent form (`5e-01`, `1.25e+02`, `0e+00`), or `NaN`, `+Inf`, `-Inf`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    power = 0 if digits == (0,) else exponent + len(digits) - 1
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def prom_alert(a: Alert) -> dict[str, Any]:
    """One alert as Prometheus' API shows it."""
    labels = prom_labels(am_labels(a.rule, a.labels, a.severity))
    labels["alertname"] = a.rule
    out: dict[str, Any] = {
        "labels": labels,
        "annotations": prom_labels(a.annotations),
        "state": a.state.value,
        "value": go_float(a.value),
    }
    active = time_or_none(a.active_at)
    if active is not None:
        out["activeAt"] = active
    return out


def alerts_data(service: AlertsView) -> dict[str, Any]:
    """`GET /api/v1/alerts`: the pending and firing alerts."""
    engine = service.engine
    return {"status": "success", "data": {"alerts": [prom_alert(a) for a in engine.state.alerts(engine.ruleset.rules)]}}


def rules_data(service: AlertsView) -> dict[str, Any]:
    """`GET /api/v1/rules`: the loaded rules, one group per rules file, each with its alerts."""
    engine = service.engine
    config = engine.config
    by_rule: dict[str, list[Alert]] = {}
    for a in engine.state.alerts(engine.ruleset.rules):
        by_rule.setdefault(a.rule, []).append(a)
    last = time_or_none(engine.last_eval) if engine.last_eval is not None else None
    groups: dict[str, dict[str, Any]] = {}
    for r in engine.ruleset.rules:
        file = config.rule_files.get(r.name, "")
        group = groups.get(file)
        if group is None:
            group = groups[file] = {
                "name": PurePath(file).stem if file else "alertd",
                "file": file,
                "rules": [],
                "interval": config.evaluation_interval,
                "limit": 0,
                "evaluationTime": engine.eval_seconds,
                "lastEvaluation": last or ZERO_TIME,
            }
        cfg = config.rule_configs.get(r.name)
        alerts = by_rule.get(r.name, [])
        states = {a.state.value for a in alerts}
        state = next((s for s in ("firing", "pending") if s in states), "inactive" if last else "unknown")
        error = engine.rule_errors.get(r.name)
        labels = prom_labels(r.labels)
        if r.severity:
            labels["severity"] = r.severity
        rule: dict[str, Any] = {
            "state": state,
            "name": r.name,
            "query": rule_query(r),
            "duration": r.hold,
            "keepFiringFor": r.keep_firing_for,
            "labels": labels,
            "annotations": prom_labels(cfg.annotations.items()) if cfg else {},
            "alerts": [prom_alert(a) for a in alerts],
            "health": "err" if error else ("ok" if last else "unknown"),
            "evaluationTime": engine.eval_seconds,
            "lastEvaluation": last or ZERO_TIME,
            "type": "alerting",
        }
        if error:
            rule["lastError"] = error
        group["rules"].append(rule)
    return {"status": "success", "data": {"groups": list(groups.values())}}


def rule_query(rule: Any) -> str:
    """What a rule watches and when it holds, in alertd's words: `train/loss{run=~"exp.*"} nonfinite`."""
    matchers = ",".join(f"{m.name}{m.op}{_quoted(m.value)}" for m in rule.matchers)
    watched = ", ".join(rule.metrics) if rule.expr is None else ""
    if matchers:
        watched += f"{{{matchers}}}"
    return f"{watched} {rule.condition.describe()}".strip()


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
