"""Expected alerts against the engine's, as `promtool test rules` compares them, in alertd's terms.

- `exp_alerts` lists the FIRING alerts of the alertname. Pending alerts are compared only where an entry
  of the same `alert_rule_test` says `exp_state: pending`: then the pending alerts must be exactly the
  entries that say so (and the firing ones exactly the others).
- Labels are the alert's labels as `/alerts` shows them: the series' labels and the rule's `labels`.
  `alertname` is never compared (promtool adds it to every expectation itself). alertd's own `metric`
  (the series' name) and `severity` (the rule's, `warning` by default) are compared only in the entries
  that name them: a promtool file never has `metric`, and names `severity` where its rules set one.
- `exp_annotations`, where given, must equal the alert's annotations (all of them); where not given they
  are not compared (promtool compares them always: an entry without them expects none).
"""

from __future__ import annotations

from collections.abc import Sequence

from alertd.model import Alert, AlertState
from alertd.ruletest.spec import AlertTest, ExpAlert

_OWN = ("metric", "severity")
"""alertd's labels that every alert has, compared only where an entry names them."""


def all_labels(alert: Alert) -> dict[str, str]:
    """The alert's labels with its `severity` (unless its rule's labels set one), without `alertname`."""
    labels = dict(alert.labels)
    if alert.severity:
        labels.setdefault("severity", alert.severity)
    labels.pop("alertname", None)
    return labels


def _wanted(entry: ExpAlert) -> dict[str, str]:
    labels = dict(entry.exp_labels)
    labels.pop("alertname", None)
    return labels


def _matches(entry: ExpAlert, alert: Alert, labels: dict[str, str]) -> bool:
    if alert.state.value != entry.exp_state:
        return False
    want = _wanted(entry)
    seen = {k: v for k, v in labels.items() if k not in _OWN or k in want}
    if seen != want:
        return False
    return entry.exp_annotations is None or dict(alert.annotations) == entry.exp_annotations


def _pairing(entries: Sequence[ExpAlert], alerts: Sequence[Alert]) -> list[int]:
    """A largest matching of entries to alerts (augmenting paths); -1 where an entry has no alert.

    Each entry is tried only against the alerts whose compared labels are its own, found by index."""
    labels = [all_labels(a) for a in alerts]
    index: dict[tuple[object, ...], list[int]] = {}
    for j, (a, lab) in enumerate(zip(alerts, labels, strict=True)):
        variants: tuple[tuple[str, ...], ...] = ((), ("metric",), ("severity",), _OWN)
        for names in variants:
            key = (a.state.value, names, tuple(sorted((k, v) for k, v in lab.items() if k not in _OWN or k in names)))
            index.setdefault(key, []).append(j)
    adj = []
    for e in entries:
        want = _wanted(e)
        names = tuple(n for n in _OWN if n in want)
        cands = index.get((e.exp_state, names, tuple(sorted(want.items()))), [])
        adj.append([j for j in cands if _matches(e, alerts[j], labels[j])])
    match_l, match_r = [-1] * len(entries), [-1] * len(alerts)
    for u in range(len(entries)):
        prev: dict[int, int] = {}
        queue, found = [u], -1
        for x in queue:
            for v in adj[x]:
                if v in prev:
                    continue
                prev[v] = x
                if match_r[v] == -1:
                    found = v
                    break
                queue.append(match_r[v])
            if found != -1:
                break
        v = found
        while v != -1:
            x = prev[v]
            nxt = match_l[x]
            match_l[x], match_r[v] = v, x
            v = -1 if x == u else nxt
    return match_l


def _shown(state: str, labels: dict[str, str], annotations: dict[str, str] | None) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{state} {{{inner}}}" + (f" annotations={annotations}" if annotations is not None else "")


def compare(check: AlertTest, got: Sequence[Alert], at: str) -> list[str]:
    """Failure lines (none: it passed) for one `alert_rule_test` entry; `got` are the alertname's alerts."""
    with_pending = any(e.exp_state == "pending" for e in check.exp_alerts)
    compared = [a for a in got if a.state is AlertState.FIRING or (with_pending and a.state is AlertState.PENDING)]
    match = _pairing(check.exp_alerts, compared)
    if all(j != -1 for j in match) and len(compared) == len(check.exp_alerts):
        return []
    used = {j for j in match if j != -1}
    lines = [f"  alertname {check.alertname} at {at}:", "    expected:"]
    lines += [f"      {_shown(e.exp_state, _wanted(e), e.exp_annotations)}" for e in check.exp_alerts]
    if not check.exp_alerts:
        lines.append("      (no firing alert)")
    lines.append("    got:")
    lines += [f"      {_shown(a.state.value, all_labels(a), dict(a.annotations))}" for a in compared]
    if not compared:
        lines.append("      (no firing alert)" if not with_pending else "      (no alert)")
    lines += [
        f"    - {_shown(e.exp_state, _wanted(e), e.exp_annotations)}"
        for e, j in zip(check.exp_alerts, match, strict=True)
        if j == -1
    ]
    lines += [f"    + {_shown(a.state.value, all_labels(a), None)}" for j, a in enumerate(compared) if j not in used]
    ignored = [a for a in got if a not in compared]
    if ignored:
        lines.append("    not compared (pending; no entry here says exp_state: pending):")
        lines += [f"      {_shown(a.state.value, all_labels(a), None)}" for a in ignored]
    return lines
