"""A simple annotation template rendered without Jinja's runtime (`alertd.templating.direct`) prints what Jinja
prints: the same text, the same missing label noted, the same cut past MAX_OUTPUT."""

from __future__ import annotations

import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.templating.annotations import ALL_NAMES, HINTS, Template, parse_template
from alertd.templating.bounds import MAX_OUTPUT
from alertd.templating.compiled import compile_template


def both(source: str) -> tuple[Template, Template]:
    """The template as alertd loads it (the direct way where it is simple), and rendered by Jinja alone."""
    return parse_template(source), Template(source, compile_template(source, ALL_NAMES, hints=HINTS))


REFS = ["metric", "value", "step", "time", "rule", "severity", "labels.run", "labels.gpu", "$labels.run",
        ".Labels.host", "$value", "Value", "labels"]  # fmt: skip
TESTED = ["value", "step", "labels.run", "labels.items", "Labels.gpu", "Value", "labels"]
"""What an `{% if %}` tests (`labels.items`: a label, where the series has one by that name, else the dict method)."""
TEXT = st.text(alphabet=st.sampled_from("ab %{}#\n°é"), max_size=6).filter(lambda t: "{" not in t and "%" not in t)


@st.composite
def templates(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["text", "ref", "if"] if depth < 2 else ["text", "ref"]))
        if kind == "text":
            parts.append(draw(TEXT))
        elif kind == "ref":
            parts.append("{{ " + draw(st.sampled_from(REFS)) + " }}")
        else:
            ref = draw(st.sampled_from(TESTED))
            test = draw(st.sampled_from(["", " is none", " is not none"]))
            then = draw(templates(depth + 1))
            otherwise = draw(st.one_of(st.none(), templates(depth + 1)))
            parts.append(f"{{% if {ref}{test} %}}{then}")
            parts.append(("" if otherwise is None else f"{{% else %}}{otherwise}") + "{% endif %}")
    return "".join(parts)


VALUES = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**20), 10**20),
    st.sampled_from([0.0, -0.0, 1e-7, 2.5, math.pi]),
)
LABELS = st.dictionaries(st.sampled_from(["run", "gpu", "host", "items", "source"]), st.text(max_size=5), max_size=5)


@settings(max_examples=400, deadline=None)
@given(templates(), VALUES, st.one_of(st.none(), st.integers(0, 10**9)), LABELS)
def test_a_simple_template_prints_what_jinja_prints(source: str, value: object, step: int | None, labels: dict) -> None:
    direct, jinja = both(source)
    values = {"metric": "eval/loss", "value": value, "step": step, "time": "", "rule": "r", "severity": "warning"}
    assert direct.render(values, labels) == jinja.render(values, labels)


def test_every_default_summary_without_a_filter_is_rendered_the_direct_way_and_prints_the_same() -> None:
    with open("rules/default.yaml", encoding="utf-8") as f:
        rules = yaml.safe_load(f)["rules"]
    sources = {text for r in rules for text in (r.get("annotations") or {}).values()}
    values = {"metric": "train/loss", "value": float("nan"), "step": 1200, "time": "", "rule": "r", "severity": "page"}
    direct_ones = 0
    for source in sorted(sources):
        direct, jinja = both(source)
        for labels in ({"run": "exp1", "gpu": "0", "host": "node1", "source": "tb"}, {}):
            assert direct.render(values, labels) == jinja.render(values, labels), source
        if direct._compiled.steps is not None:
            direct_ones += 1
        else:
            assert "|" in source, source  # a filter: Jinja's
    assert direct_ones == len(sources) - 1


def test_a_long_text_is_cut_as_jinja_cuts_it_and_a_missing_label_past_the_cut_is_not_noted() -> None:
    direct, jinja = both("{{ labels.run }}{% if step is not none %} at {{ step }}{% endif %} {{ labels.gone }}")
    assert direct._compiled.steps is not None
    values = {"metric": "m", "value": 1.0, "step": 7, "time": "", "rule": "r", "severity": "page"}
    for run in ("x" * (MAX_OUTPUT + 5), "x" * (MAX_OUTPUT - 20)):
        text, problem = direct.render(values, {"run": run})
        assert (text, problem) == jinja.render(values, {"run": run})
        assert len(text) == MAX_OUTPUT if len(run) > MAX_OUTPUT else text.endswith("<no value>")
    assert direct.render(values, {"run": "x" * (MAX_OUTPUT + 5)})[1] is None
    assert direct.render(values, {"run": "short"}) == ("short at 7 <no value>", "the series has no label 'gone'")


def test_a_template_with_a_filter_a_call_or_an_elif_is_left_to_jinja() -> None:
    for source in ("{{ value | humanize }}", "{{ labels.get('run') }}", "{% if step %}a{% elif value %}b{% endif %}",
                   "{{ value * 2 }}", "{% for k, v in labels.items() %}{{ k }}{% endfor %}"):  # fmt: skip
        assert parse_template(source)._compiled.steps is None, source
