"""Annotation templates as Jinja2: Prometheus' spellings and functions, checks at load, hostile templates."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alertd.templating import funcs as f
from alertd.templating.annotations import TemplateError, parse_template

VALUES = {"metric": "train/loss", "value": 1234567.0, "step": 250, "time": "2026-05-28T20:27:10Z"}
LABELS = {"run": "gpt-small", "host": "node1", "metric": "train/loss"}


def render(text: str, value: float = 1234567.0, labels: dict[str, str] | None = None) -> tuple[str, str | None]:
    values = {**VALUES, "value": value, "rule": "loss_high", "severity": "critical"}
    return parse_template(text).render(values, LABELS if labels is None else labels)


def error(text: str) -> str:
    with pytest.raises(TemplateError) as e:
        parse_template(text)
    return str(e.value)


# --- Prometheus spellings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{{ $labels.run }} on {{ $labels.host }}: {{ $value | humanize }}",
        '{{ $labels["run"] }} on {{ $labels["host"] }}: {{ humanize $value }}',
        "{{ .Labels.run }} on {{ .Labels.host }}: {{ .Value | humanize }}",
        "{{ labels.run }} on {{ labels['host'] }}: {{ humanize(value) }}",
    ],
)
def test_prometheus_and_jinja_spellings_say_the_same(text: str) -> None:
    assert render(text) == ("gpt-small on node1: 1.235M", None)


def test_a_dollar_outside_a_tag_or_inside_a_string_is_text() -> None:
    assert render("costs $5 {{ '$labels.run' }} {{ \"$value\" }}") == ("costs $5 $labels.run $value", None)


def test_raw_blocks_are_left_alone() -> None:
    assert render("{% raw %}{{ $labels.run }}{% endraw %}") == ("{{ $labels.run }}", None)


def test_if_and_for_work() -> None:
    text = (
        "{% if $value > 1000 %}big{% else %}small{% endif %}: "
        "{% for name, v in labels | dictsort %}{{ name }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %}"
    )
    assert render(text) == ("big: host=node1,metric=train/loss,run=gpt-small", None)
    assert render(text, value=3.0)[0].startswith("small: ")


def test_go_printf_and_the_jinja_spellings_of_it() -> None:
    assert render('{{ printf "%.2f" $value }}') == ("1234567.00", None)
    assert render('{{ printf("%d steps, %s", 12, "ok") }}') == ("12 steps, ok", None)
    assert render('{{ $value | printf("%.1e") }}') == ("1.2e+06", None)
    assert render('{{ "%.3f" | format(0.5) }}') == ("0.500", None)


def test_todays_syntax_gives_todays_output() -> None:
    assert render("{{ value | round(2) }}", value=3.14159) == ("3.14", None)
    assert render("{{ value | round(2) }}", value=3.0) == ("3.00", None)
    assert render("{{ value }} {{ value | upper }}", value=math.inf) == ("+Inf +INF", None)
    assert render("{{ value }}", value=0.1234567891) == ("0.123457", None)
    assert render("{{ rule | upper }} {{ severity | lower }} at step {{ step }}")[0] == "LOSS_HIGH critical at step 250"


def test_a_missing_label_prints_no_value_and_is_reported_but_can_be_tested_for() -> None:
    assert render("on {{ $labels.gpu }}") == ("on <no value>", "the series has no label 'gpu'")
    assert render("{% if labels.gpu is defined %}gpu {{ labels.gpu }}{% else %}no gpu{% endif %}") == ("no gpu", None)
    assert render("{{ labels.gpu | default('cpu') }}") == ("cpu", None)


def test_jinja_filters_tests_and_blocks_work_in_the_sandbox() -> None:
    text = (
        "{{ range(5) | map('string') | join(',') }} {{ labels | dictsort | map(attribute=0) | join('+') }} "
        "{{ range(6) | select('odd') | list }} {% filter upper %}{{ metric }}{% endfilter %} "
        "{{ '%05.1f' | format(value) }} {{ labels.run.startswith('gpt') }} {{ labels.run | replace('-', '_') }}"
    )
    assert render(text, value=3.14159) == (
        "0,1,2,3,4 host+metric+run [1, 3, 5] TRAIN/LOSS 003.1 True gpt_small",
        None,
    )


def test_a_label_named_like_a_method_is_the_label() -> None:
    assert render("{{ labels.items }}", labels={"items": "42"}) == ("42", None)


# --- the humanize family against Prometheus' own outputs (template_test.go) -----------------------


@pytest.mark.parametrize(
    ("func", "values", "expected"),
    [
        (f.humanize, [0.0, 1.0, 1234567.0, 0.12], "0:1:1.235M:120m"),
        (f.humanize, [0.1, 0.0001, 0.12345, 60.1, 60.5, 1.2345, 12.345], "100m:100u:123.5m:60.1:60.5:1.234:12.35"),
        (f.humanize, [math.nan, math.inf, -math.inf], "NaN:+Inf:-Inf"),
        (f.humanize1024, [0.0, 1.0, 1048576.0, 0.12], "0:1:1Mi:0.12"),
        (
            f.humanize_duration,
            [0, 1, 60, 3600, 86400, 86400 + 3600, -(86400 * 2 + 3600 * 3 + 60 * 4 + 5), 899.99, 3661],
            "0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:1d 1h 0m 0s:-2d 3h 4m 5s:14m 59s:1h 1m 1s",
        ),
        (
            f.humanize_duration,
            [0.1, 0.0001, 0.12345, 60.1, 60.5, 1.2345, 12.345],
            "100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s",
        ),
        (f.humanize_percentage, [0, 0.1234567, 0.5, 1, 1.5], "0%:12.35%:50%:100%:150%"),
        (f.humanize_timestamp, [1435065584.128, 0], "2015-06-23 13:19:44.128 +0000 UTC:1970-01-01 00:00:00 +0000 UTC"),
        (f.title, ["aa bb CC", "run-name_x"], "Aa Bb CC:Run-Name_x"),
    ],
)
def test_humanize_family_matches_prometheus(func: object, values: list[float], expected: str) -> None:
    assert ":".join(func(v) for v in values) == expected  # type: ignore[operator]


def test_functions_take_numeric_strings_and_refuse_other_text() -> None:
    assert render("{{ '1234567' | humanize }}") == ("1.235M", None)
    text, problem = render("{{ labels.run | humanize }}")
    assert text == "<no value>" and problem is not None and "humanize" in problem


# --- checks at load, with places ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ok\n  {{ nope }}", "line 2, column 6: unknown name 'nope' (known: Labels, Value, labels, metric,"),
        ("{{ $externalLabels.dc }}", "unknown name 'externalLabels' (alertd has no external labels"),
        ("{{ value | humanise }}", "line 1, column 12: unknown filter 'humanise' (known: "),
        ("{% if value is odd_ish %}{% endif %}", "line 1, column 16: unknown test 'odd_ish'"),
        ("{{ value is oddish }}", "unknown test 'oddish'"),
        ("a\nb\n{{ value ", "line 3: syntax error: unexpected end of template"),
        ("{% if value %}x", "syntax error: Unexpected end of template"),
        ("{{ range .Alerts }}x{{ end }}", "Go template syntax '{{ range }}': write {% for alert in alerts %}"),
        ("{{ if gt $value 1.0 }}x{{ end }}", "Go template syntax '{{ if }}': write {% if cond %}"),
        ('{{ $value | printf "%.2f" }}', "write printf(arg, value)"),
        ("{{ len .Labels }}", "Go's call 'len ...' has no Jinja spelling: write x | length"),
        ('{{ query "up" | first | value }}', "an alertd template cannot run PromQL"),
    ],
)
def test_check_errors_name_line_and_column(text: str, expected: str) -> None:
    assert expected in error(text)


# --- hostile templates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ labels.__init__ }}",
        "{{ labels['__class__'] }}",
        "{{ labels | attr('__class__') }}",
        "{{ labels | map(attribute='__class__') | list }}",
        "{{ __import__('os').system('id') }}",
        "{% include '/etc/passwd' %}",
        "{% import '/etc/passwd' as p %}",
        "{% from '/etc/passwd' import x %}",
        "{% extends '/etc/passwd' %}",
        "{{ 'a'.ljust(1000000000) }}",
        "{{ '{:>1000000000}'.format(1) }}",
        "{{ value | random }}",
        "{{ lipsum(1000000) }}",
        "{{ metric | urlize }}",
        "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
        "{% if 1 %}" * 3000 + "{% endif %}" * 3000,
        "{% for x in range(3) recursive %}{{ loop(range(3)) }}{% endfor %}",
    ],
)
def test_hostile_templates_are_refused_at_load(text: str) -> None:
    error(text)


def test_pathological_sources_are_checked_in_linear_time() -> None:
    for text in ["{% raw %}" * 100_000, "{{ humanize " + "a " * 50_000 + "! }}", "{{ " + "$" * 100_000]:
        started = time.monotonic()
        error(text)
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{{ 'a' * 10**9 }}", "longer than 65536"),
        ("{{ ['a'] * 10**9 }}", "longer than 65536"),
        ("{{ 10 ** 1000000 }}", "larger than 4096 bits"),
        ("{% for i in range(10**9) %}x{% endfor %}", "MAX_RANGE"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than 20000"),
        ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}", "more than 20000"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "longer"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "longer"),
        ("{{ 'x' | center(1000000000) }}", "width"),
        ("{{ 'x' | indent(1000000000) }}", "width"),
        ("{{ '%1000000000d' % 1 }}", "wider than 200"),
        ("{{ '%1000000000d' | format(1) }}", "wider than 200"),
        ("{{ printf('%1000000000d', 1) }}", "wider than 200"),
        ("{{ ('x' * 60000) | replace('x', 'yy') }}", "longer than 65536"),
        ("{{ ('x' * 60000).replace('x', 'yy') }}", "longer than 65536"),
        ("{{ range(60000) | join('abc') }}", "longer than 65536"),
        ("{% set f = 'x'.ljust %}{{ f(1000000000) }}", "calling .ljust() is not allowed"),
        ("{% set b = range(60000)|list %}{% for i in range(20000) %}{% set x = b|sum %}{% endfor %}", "1000000 items"),
        ("{% set s = 'x' * 60000 %}{% for i in range(20000) %}{% set n = s.count('y') %}{% endfor %}", "1000000"),
        ("{% set s = 'x' * 60000 %}{% for i in range(20000) %}{% set t = s ~ '' %}{% endfor %}", "1000000 items"),
        ("{% set b = range(60000)|list %}{% for i in range(20000) %}{% set t = 59999 in b %}{% endfor %}", "items"),
        ("{% set b = range(60000)|list %}{% for i in range(20000) %}{% set t = 9 is in b %}{% endfor %}", "items"),
        ("{% set b = range(60000)|list %}{% for i in range(99) %}{% set t = b|sort %}{% endfor %}", "items"),
        ("{% set s = 'x ' * 30000 %}{% for i in range(20000) %}{% set t = title(s) %}{% endfor %}", "items"),
        ("{% set f = labels.items %}{% set g = metric.zfill %}{{ g(1000000000) }}", "calling .zfill() is not allowed"),
        ("{% set f = 'x'.format %}{{ f(1) }}", "str.format is not available"),
    ],
)
def test_hostile_templates_are_stopped_while_rendering_quickly(text: str, why: str) -> None:
    started = time.monotonic()
    out, problem = render(text)
    assert time.monotonic() - started < 3
    assert out == "<no value>"
    assert problem is not None and problem.startswith("the template failed: ") and why in problem


def test_output_is_capped() -> None:
    out, problem = render("{% for i in range(5000) %}{{ 'x' * 1000 }}{% endfor %}")
    assert problem is None and len(out) == 16384 and out.endswith("…")


# --- alertd check, as a user runs it --------------------------------------------------------------


def alertd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120)


def test_alertd_check_names_each_bad_template_with_its_place(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: good\n"
        "    metric: loss\n"
        "    condition: nonfinite\n"
        "    annotations:\n"
        "      summary: '{{ $labels.run }} is {{ $value | humanize }} at step {{ step }}'\n"
        "      description: '{% if $value > 1 %}big{% endif %}'\n"
        "  - name: bad\n"
        "    metric: loss\n"
        "    condition: nonfinite\n"
        "    annotations:\n"
        "      summary: |\n"
        "        first line\n"
        "        {{ $labels.run }} {{ valeu }}\n"
        "      description: '{{ ''''.__class__.__mro__ }}'\n"
        "      runbook: '{{ value | humanise }}'\n"
        "      broken: '{% if value %}'\n"
    )
    done = alertd("check", str(rules))
    assert done.returncode == 1, done.stdout + done.stderr
    err = done.stdout + done.stderr
    assert f"{rules}:12: rules[1].annotations.summary: template line 2, column 22: unknown name 'valeu'" in err
    assert "rules[1].annotations.description: template line 1, column 7: names starting with '_'" in err
    assert "rules[1].annotations.runbook: template line 1, column 12: unknown filter 'humanise'" in err
    assert "rules[1].annotations.broken: template line 1: syntax error" in err
    assert "rules[0]" not in err


def test_alertd_check_accepts_prometheus_annotations(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: slow\n"
        "    metric: step_time\n"
        "    condition: '> 2'\n"
        "    annotations:\n"
        "      summary: '{{ $labels.run }}: a step takes {{ humanizeDuration $value }}'\n"
        "      description: '{{ .Labels.host }} {{ $value | humanizePercentage }}'\n"
    )
    done = alertd("check", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr
