"""Annotation templates: names only, nothing executed."""

from __future__ import annotations

import math

import pytest

from alertd.templating.annotations import TemplateError, parse_template


def render(text: str, **values: object) -> tuple[str, str | None]:
    labels = values.pop("labels", {})
    return parse_template(text).render(values, labels)  # type: ignore[arg-type]


def test_names_and_labels() -> None:
    text = "{{ metric }} is {{ value }} at step {{ step }} in {{ labels.run }} ({{ labels['gpu'] }})"
    got = render(text, metric="loss", value=math.nan, step=250, labels={"run": "exp1", "gpu": "0"})
    assert got == ("loss is NaN at step 250 in exp1 (0)", None)


def test_values_are_readable() -> None:
    assert render("{{ value }}", value=math.inf)[0] == "+Inf"
    assert render("{{ value }}", value=0.1234567891)[0] == "0.123457"
    assert render("{{ value | round(2) }}", value=3.14159)[0] == "3.14"
    assert render("{{ rule | upper }}", rule="gpu_hot")[0] == "GPU_HOT"


def test_a_missing_label_renders_no_value_and_says_so() -> None:
    assert render("on {{ labels.host }}", labels={}) == ("on <no value>", "the series has no label 'host'")


@pytest.mark.parametrize(
    "text", ["{{ __import__('os').system('id') }}", "{{ value.__class__ }}", "{{ value | eval }}", "{{ x", "{{ }}"]
)
def test_anything_but_a_name_is_refused(text: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(text)
