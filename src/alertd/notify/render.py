"""Plain-text pieces shared by every human-readable notification (chat, e-mail, log)."""

from __future__ import annotations

import logging

from alertd.model import (
    RESOLVED_SUMMARY,
    RUN_ENDED,
    Notification,
    Transition,
    TransitionKind,
    format_time,
    value_text,
)
from alertd.templating.errors import RenderError
from alertd.templating.notifications import compile_notifier_template, template_data

log = logging.getLogger(__name__)

__all__ = ["TitleText", "alert_line", "body", "title", "value_text"]


def title(n: Notification) -> str:
    """`[FIRING:2] loss_not_finite (run=exp1)`: the status, the count, the rule(s) and the group labels."""
    firing = sum(1 for a in n.alerts if a.state in (TransitionKind.FIRING, TransitionKind.PENDING))
    status = f"FIRING:{firing}" if n.status == "firing" else "RESOLVED"
    rules = ", ".join(sorted({a.rule for a in n.alerts}))
    group = " ".join(f"{k}={v}" for k, v in n.group_labels if k != "rule")
    return f"[{status}] {rules}" + (f" ({group})" if group else "")


def alert_line(t: Transition) -> str:
    """One alert on one line: state, rule, metric, value, step, run, time and the summary if any.

    A resolved alert says its series is back (`RESOLVED grad_norm_exploding: train/grad_norm back to 1.1 at
    step 9 ...`) and shows the rule's `resolved_summary` if it has one, never the firing summary; an alert its
    run's end closed shows the value it was left at and says the run ended."""
    labels = dict(t.labels)
    firing = t.state in (TransitionKind.FIRING, TransitionKind.PENDING)
    notes = dict(t.annotations)
    verb = "=" if firing or RUN_ENDED in notes else "back to"  # an alert its run's end closed: it may still hold
    parts = [f"{t.state.value.upper()} {t.rule}: {labels.get('metric', '?')} {verb} {value_text(t.value)}"]
    if t.step is not None:
        parts.append(f"at step {t.step}")
    if "run" in labels:
        parts.append(f"in run {labels['run']}")
    parts.append(f"({format_time(t.time)})")
    line = " ".join(parts)
    summary = notes.get("summary") if firing else notes.get(RESOLVED_SUMMARY) or notes.get(RUN_ENDED)
    return f"{line}: {summary}" if summary else line


def body(n: Notification) -> str:
    """The title and one line per alert."""
    return "\n".join([title(n), *(alert_line(a) for a in n.alerts)])


class TitleText:
    """A notifier's own `title`/`text` templates (either may be absent), compiled once.

    `render` gives each rendered text (a title stripped, a text without trailing blanks), or None where
    the notifier has no template or the template failed: a failure is logged (the notifier's name, which
    template and why; never a URL or a secret) and that part falls back to alertd's own title or lines,
    so the notification is still delivered.
    """

    __slots__ = ("_name", "_templates")

    def __init__(self, name: str, title: str | None, text: str | None) -> None:
        self._name = name
        self._templates = tuple(
            (part, compile_notifier_template(source) if source is not None else None)
            for part, source in (("title", title), ("text", text))
        )

    @property
    def empty(self) -> bool:
        """True when the notifier has neither template."""
        return all(c is None for _, c in self._templates)

    def render(self, n: Notification, external_url: str = "") -> tuple[str | None, str | None]:
        """The rendered (title, text) for `n`; None for a part without a template or whose template failed."""
        if self.empty:
            return None, None
        data = template_data(n, external_url)
        out: list[str | None] = []
        for part, compiled in self._templates:
            if compiled is None:
                out.append(None)
                continue
            try:
                text = compiled.render(data)
                out.append(text.strip() if part == "title" else text.rstrip())
            except RenderError as e:
                log.warning(
                    "notifier %s: its %s template failed (%s); sending alertd's own %s", self._name, part, e, part
                )
                out.append(None)
        return out[0], out[1]
