"""Annotation templates: Jinja2 in a sandbox, with Prometheus' spellings.

`{{ metric }} is {{ value }} at step {{ step }} in {{ labels.run }}` and the Prometheus rule spelling
`{{ $labels.run }} is {{ $value | humanize }}` both work; so do `{% if %}`, `{% for %}` and the
Prometheus functions (`humanize`, `humanizeDuration`, ..., see `funcs`). A template is
checked and compiled once, when the rules file is loaded (an unknown name, filter or syntax error is a
configuration error naming the template's line and column); see `env` for the sandbox and the
bounds on what a template may do while rendering.

Names: `metric`, `value`, `step`, `time`, `rule`, `severity`, `labels.NAME` (or `labels["NAME"]`);
`$labels`, `$value`, `.Labels`, `.Value` are the same. A label the series lacks prints `<no value>`
and is reported so the rule can record it; a template that fails while rendering (a refused operation)
gives `<no value>` and the reason, never an exception.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from alertd.templating.compiled import Compiled, compile_template
from alertd.templating.errors import CheckError, RenderError
from alertd.templating.labels import MISSING, LabelView

NAMES = ("metric", "value", "step", "time", "rule", "severity")
ALL_NAMES = (*NAMES, "labels", "Labels", "Value")
"""Every name an annotation template may use (`Labels`, `Value`: Prometheus' `.Labels`, `.Value`)."""
HINTS = {
    "externalLabels": "alertd has no external labels: write the text itself, or use labels.NAME",
    "ExternalLabels": "alertd has no external labels: write the text itself, or use labels.NAME",
}

__all__ = ["MISSING", "NAMES", "Template", "TemplateError", "parse_template"]


class TemplateError(ValueError):
    """A template that can't be used: the message names the line and column."""


class Template:
    """A checked, compiled annotation template."""

    __slots__ = ("_compiled", "source")

    def __init__(self, source: str, compiled: Compiled) -> None:
        self.source = source
        self._compiled = compiled

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def __repr__(self) -> str:
        return f"Template({self.source!r})"

    def reads(self, name: str) -> bool:
        """Whether the template reads the data name `name` (a costly one is made only for the templates that do)."""
        return name in self._compiled.reads

    def render(
        self, values: Mapping[str, object], labels: Mapping[str, str] | Iterable[tuple[str, str]]
    ) -> tuple[str, str | None]:
        """Return the text and, if a label was missing or the template failed, a message saying why."""
        missing: list[str] = []
        view = LabelView(labels, missing)
        data: dict[str, Any] = {name: values.get(name) for name in NAMES}
        data.update(labels=view, Labels=view, Value=data["value"])
        try:
            text = self._compiled.render(data)
        except RenderError as e:
            return MISSING, f"the template failed: {e}"
        if missing:
            return text, f"the series has no label {missing[0]!r}"
        return text, None


@functools.lru_cache(maxsize=4096)
def parse_template(source: str) -> Template:
    """Check and compile `source` (once per distinct text), or raise TemplateError naming the place."""
    try:
        return Template(source, compile_template(source, ALL_NAMES, hints=HINTS, all_given=True))
    except CheckError as e:
        raise TemplateError(str(e)) from None
