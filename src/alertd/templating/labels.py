"""Labels as a template sees them: `labels.run` and `labels["run"]`, a missing one printing `<no value>`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jinja2 import Undefined

MISSING = "<no value>"
"""What a missing label (or a missing value) renders as: Go templates' own text."""

LABEL_METHODS = frozenset({"items", "keys", "values", "get"})
"""The dict methods a template may call on labels (a label of the same name wins: `labels.items`)."""


class MissingLabel(Undefined):
    """A label the alert does not have: false in `{% if %}`, `<no value>` when printed (and noted)."""

    __slots__ = ("_label", "_notes")

    def __init__(self, name: str, notes: list[str]) -> None:
        super().__init__(name=name)
        self._label = name
        self._notes = notes

    def __str__(self) -> str:
        self._notes.append(self._label)
        return MISSING


class LabelView(dict[str, str]):
    """Labels for a template: `labels.run` and `labels["run"]`; a missing one is a MissingLabel."""

    __slots__ = ("missing",)

    def __init__(self, labels: Mapping[str, str] | Iterable[tuple[str, str]], missing: list[str]) -> None:
        super().__init__(labels)
        self.missing = missing

    def __missing__(self, key: str) -> MissingLabel:
        return MissingLabel(key, self.missing)

    def item_first(self, attribute: str) -> bool:
        """Whether `labels.attribute` in a template is the label: it is unless it names a dict method and no label."""
        return attribute in self or attribute not in LABEL_METHODS
