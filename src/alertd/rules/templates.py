"""Annotation templates: `{{ metric }} is {{ value }} at step {{ step }} in {{ labels.run }}`.

Only names are looked up; nothing is executed. A template is parsed once when the rules file is
loaded (an unknown name is a configuration error); rendering a label the series doesn't have gives
`<no value>` and reports the problem so the rule can record it.

Names: `metric`, `value`, `step`, `time`, `rule`, `severity`, `labels.NAME` (or `labels["NAME"]`).
Filters: `| round(N)` on the value, `| upper`, `| lower`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

NAMES = ("metric", "value", "step", "time", "rule", "severity")
_TAG = re.compile(r"\{\{(.*?)\}\}", re.S)
_LABEL = re.compile(r"""^labels(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"']+)["']\s*\])$""")
_ROUND = re.compile(r"^round\(\s*(\d+)\s*\)$")
MISSING = "<no value>"


class TemplateError(ValueError):
    """A template that can't be parsed."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    label: str | None
    filters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and fields, alternating."""

    source: str
    parts: tuple[str | _Field, ...]

    def render(self, values: Mapping[str, object], labels: Mapping[str, str]) -> tuple[str, str | None]:
        """Return the text and, if a label was missing, a message saying which."""
        out: list[str] = []
        problem = None
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            if part.label is not None:
                text = labels.get(part.label)
                if text is None:
                    problem = f"the series has no label {part.label!r}"
                    text = MISSING
            else:
                text = _text(values.get(part.name))
                if part.name == "value":
                    text = _rounded(values.get("value"), part.filters, text)
            out.append(_apply(text, part.filters))
        return "".join(out), problem


def parse_template(source: str) -> Template:
    """Parse `source`, or raise TemplateError naming the bad field."""
    parts: list[str | _Field] = []
    pos = 0
    for m in _TAG.finditer(source):
        if m.start() > pos:
            parts.append(source[pos : m.start()])
        parts.append(_parse_field(m.group(1)))
        pos = m.end()
    rest = source[pos:]
    if "{{" in rest or "}}" in rest:
        raise TemplateError("unbalanced '{{' or '}}'")
    if rest:
        parts.append(rest)
    return Template(source, tuple(parts))


def _parse_field(text: str) -> _Field:
    expr, *filters = (p.strip() for p in text.split("|"))
    for f in filters:
        if f not in ("upper", "lower") and not _ROUND.match(f):
            raise TemplateError(f"unknown filter {f!r} in '{{{{{text}}}}}' (known: round(N), upper, lower)")
    m = _LABEL.match(expr)
    if m:
        return _Field("labels", m.group(1) or m.group(2), tuple(filters))
    if expr.startswith("$"):
        expr = expr[1:]
    if expr not in NAMES:
        known = ", ".join((*NAMES, "labels.NAME"))
        raise TemplateError(f"unknown name {expr!r} in '{{{{{text}}}}}' (known: {known})")
    return _Field(expr, None, tuple(filters))


def _text(value: object) -> str:
    if value is None:
        return MISSING
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return f"{value:.6g}"
    return str(value)


def _rounded(value: object, filters: tuple[str, ...], default: str) -> str:
    for f in filters:
        m = _ROUND.match(f)
        if m and isinstance(value, float) and math.isfinite(value):
            return f"{value:.{int(m.group(1))}f}"
    return default


def _apply(text: str, filters: tuple[str, ...]) -> str:
    for f in filters:
        if f == "upper":
            text = text.upper()
        elif f == "lower":
            text = text.lower()
    return text
