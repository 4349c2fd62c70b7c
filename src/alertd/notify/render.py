"""Plain-text pieces shared by every human-readable notification (chat, e-mail, log)."""

from __future__ import annotations

from alertd.model import Notification, Transition, TransitionKind, format_time, format_value


def value_text(value: float) -> str:
    """A value as a person reads it: `NaN`, `+Inf`, `0.1235`, `1.2e+06`."""
    v = format_value(value)
    return v if isinstance(v, str) else f"{v:.6g}"


def title(n: Notification) -> str:
    """`[FIRING:2] loss_not_finite (run=exp1)`: the status, the count, the rule(s) and the group labels."""
    firing = sum(1 for a in n.alerts if a.state in (TransitionKind.FIRING, TransitionKind.PENDING))
    status = f"FIRING:{firing}" if n.status == "firing" else "RESOLVED"
    rules = ", ".join(sorted({a.rule for a in n.alerts}))
    group = " ".join(f"{k}={v}" for k, v in n.group_labels if k != "rule")
    return f"[{status}] {rules}" + (f" ({group})" if group else "")


def alert_line(t: Transition) -> str:
    """One alert on one line: state, rule, metric, value, step, run, time and the summary if any."""
    labels = dict(t.labels)
    parts = [f"{t.state.value.upper()} {t.rule}: {labels.get('metric', '?')} = {value_text(t.value)}"]
    if t.step is not None:
        parts.append(f"at step {t.step}")
    if "run" in labels:
        parts.append(f"in run {labels['run']}")
    parts.append(f"({format_time(t.time)})")
    line = " ".join(parts)
    summary = dict(t.annotations).get("summary")
    return f"{line}: {summary}" if summary else line


def body(n: Notification) -> str:
    """The title and one line per alert."""
    return "\n".join([title(n), *(alert_line(a) for a in n.alerts)])
