"""`alertd test` reads `promtool test rules` files: the notation, the grid, stale, firing-only exp_alerts."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alertd.errors import ConfigError
from alertd.ruletest import STALE, expand_values, parse_series, run_test_file

EXAMPLE = Path(__file__).parent / "promtool_example"
AGREEMENT = Path(__file__).parent / "promtool_agreement"
SHIPPED = sorted((Path(__file__).parents[2] / "rules" / "tests").glob("*.yaml"))


def alertd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120)


def write(tmp_path: Path, rules: str, test: str) -> str:
    (tmp_path / "rules.yaml").write_text(rules)
    (tmp_path / "t.yaml").write_text(test)
    return str(tmp_path / "t.yaml")


HOT = "rules:\n  - {name: hot, metric: temp, condition: '> 80', severity: critical}\n"
HOT_FOR = "rules:\n  - {name: hot, metric: temp, condition: '> 80', for: 2m}\n"


def failures(path: str) -> str:
    return "\n".join(run_test_file(path).failures)


# The Prometheus documentation's example, its test file verbatim


def test_the_promtool_docs_example_passes_and_says_what_it_did_not_run() -> None:
    done = alertd("test", str(EXAMPLE / "test.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == (
        f"{EXAMPLE / 'test.yml'}: 1 passed, 0 failed, 1 not run (promql_expr_test: alertd's rules are not PromQL)"
    )
    refused = [x for x in lines if x.startswith("NOT RUN")]
    assert len(refused) == 1
    assert "tests[0].promql_expr_test[0] ('go_goroutines > 5'): not run: alertd's rules are not PromQL" in refused[0]


def test_the_docs_example_fails_when_its_expectation_is_wrong(tmp_path: Path) -> None:
    """The same files with the expected summary changed: the annotations are really compared."""
    shutil.copy(EXAMPLE / "alerts.yml", tmp_path / "alerts.yml")
    text = (EXAMPLE / "test.yml").read_text()
    assert text.count('summary: "Instance localhost:9090 down"') == 1
    (tmp_path / "test.yml").write_text(text.replace("localhost:9090 down", "localhost:9091 down"))
    done = alertd("test", str(tmp_path / "test.yml"))
    assert done.returncode == 1
    assert '- firing {instance="localhost:9090", job="prometheus", severity="page"} annotations={' in done.stdout
    assert "'summary': 'Instance localhost:9091 down'" in done.stdout
    assert "'summary': 'Instance localhost:9090 down'" in done.stdout  # what alertd's rules rendered


def test_the_docs_example_ignores_the_pending_alert_and_compares_it_when_asked(tmp_path: Path) -> None:
    """At 10m node_exporter's `up` has been 0 for 3 minutes: InstanceDown is pending for it, not compared."""
    shutil.copy(EXAMPLE / "alerts.yml", tmp_path / "alerts.yml")
    text = (EXAMPLE / "test.yml").read_text()
    pending = """
          - eval_time: 10m
            alertname: InstanceDown
            exp_alerts:
                - exp_labels: {severity: page, instance: "localhost:9090", job: prometheus}
                - exp_labels: {instance: "localhost:9100", job: node_exporter}
                  exp_state: pending
      # Unit tests for promql expressions."""
    (tmp_path / "test.yml").write_text(text.replace("\n      # Unit tests for promql expressions.", pending, 1))
    outcome = run_test_file(str(tmp_path / "test.yml"))
    assert outcome.failures == [] and outcome.passed == 1 and outcome.checks == 2
    (tmp_path / "test.yml").write_text(
        text.replace("\n      # Unit tests for promql expressions.", pending, 1).replace(
            '"localhost:9100", job: node_exporter}', '"localhost:9100", job: x}'
        )
    )
    assert '- pending {instance="localhost:9100", job="x"}' in failures(str(tmp_path / "test.yml"))


def test_the_file_promtool_also_passes_passes(tmp_path: Path) -> None:
    """promtool_agreement/test.yml: the real promtool passes it with prom.yml (its README); so does alertd,
    and both fail it once gpu "4" is left out at 3m."""
    done = alertd("test", str(AGREEMENT / "test.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith("test.yml: 3 passed, 0 failed")
    shutil.copy(AGREEMENT / "alertd.yml", tmp_path / "alertd.yml")
    text = (AGREEMENT / "test.yml").read_text()
    gpu4 = ', {exp_labels: {gpu: "4"}}]}'
    assert text.count(gpu4) == 2
    (tmp_path / "test.yml").write_text(text.replace(gpu4, "]}", 1))
    done = alertd("test", str(tmp_path / "test.yml"))
    assert done.returncode == 1
    assert "alertname hot0 at eval_time 3m:" in done.stdout
    assert '+ firing {gpu="4", metric="temp", severity="warning"}' in done.stdout


# The series notation: promql/parser's series descriptions


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("1+1x3", [1, 2, 3, 4]),
        ("-2+4x3", [-2, 2, 6, 10]),
        (" 1-2x4", [1, -1, -3, -5, -7]),
        (" 1x4", [1, 1, 1, 1, 1]),
        ("1 _x3 stale", [1, None, None, None, STALE]),
        ("_ _x0 stalex1 _x2", [None, STALE, STALE, None, None]),
        ("1_000 .5 1e3 -Inf +inf", [1000, 0.5, 1000, -math.inf, math.inf]),
        ("10+10x2 30+20x5", [10, 20, 30, 30, 50, 70, 90, 110, 130]),
    ],
)
def test_series_values_expand_as_promtool_expands_them(text: str, values: list[object]) -> None:
    assert expand_values(text) == values


def test_an_increment_is_summed_step_by_step_as_prometheus_does() -> None:
    assert expand_values("0.1+0.1x3") == [0.1, 0.2, 0.1 + 0.1 + 0.1, 0.1 + 0.1 + 0.1 + 0.1]
    got = expand_values("NaN nan NaNx1")
    assert len(got) == 4 and all(isinstance(v, float) and math.isnan(v) for v in got)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 x", "can't read 'x'"),
        ("1+1", "an increment needs a count"),
        ("stale+1x2", "can't read 'stale+1x2'"),
        ("_+1x2", "can't read '_+1x2'"),
        ("1x99999999999", "makes more than 1,000,000 values"),
    ],
)
def test_unreadable_values_say_which_token(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_values(text)


def test_series_names_in_prometheus_and_alertd_spellings() -> None:
    assert str(parse_series('up{job="prometheus", instance="localhost:9090"}')) == (
        'up{instance="localhost:9090",job="prometheus"}'
    )
    assert parse_series('{"train/loss", run="a",}') == parse_series('train/loss{run="a"}')
    assert parse_series("{__name__='gpu.temperature', gpu=`0`}") == parse_series('gpu.temperature{gpu="0"}')
    assert parse_series(r'x{a="q\"uote\\d"}').labels == (("a", 'q"uote\\d'),)
    for bad in ('up{job="a"', "{job='a'}", "up{job=a}", 'up{a="1", a="2"}', 'up{job="a"} extra'):
        with pytest.raises(ValueError):
            parse_series(bad)


# stale and `_`


def test_stale_ends_a_series_so_its_alert_resolves_while_a_gap_keeps_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT,
        """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series:
      - {series: 'temp{gpu="0"}', values: "90 90 stale"}
      - {series: 'temp{gpu="1"}', values: "90 90 _"}
      - {series: 'temp{gpu="2"}', values: "90 stale 90"}
    alert_rule_test:
      - eval_time: 1m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}}, {exp_labels: {gpu: "1"}}]
      - eval_time: 2m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "1"}}, {exp_labels: {gpu: "2"}}]
      - eval_time: 10m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "1"}}, {exp_labels: {gpu: "2"}}]
""",
    )
    outcome = run_test_file(path)
    assert outcome.failures == [] and outcome.checks == 3


def test_stale_drops_a_pending_alert_so_for_starts_again(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT_FOR,
        """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series:
      - {series: 'temp{gpu="0"}', values: "90 90 stale 90x5"}
      - {series: 'temp{gpu="1"}', values: "90 90 _ 90x5"}
    alert_rule_test:
      - {eval_time: 2m, alertname: hot, exp_alerts: [{exp_labels: {gpu: "1"}}]}
      - eval_time: 4m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "1"}}, {exp_labels: {gpu: "0"}, exp_state: pending}]
      - {eval_time: 5m, alertname: hot, exp_alerts: [{exp_labels: {gpu: "1"}}, {exp_labels: {gpu: "0"}}]}
""",
    )
    assert failures(path) == ""


def test_a_stale_series_is_absent_from_its_last_real_sample(tmp_path: Path) -> None:
    rules = "rules:\n  - {name: quiet, metric: temp, condition: {absent: 3m}}\n"
    path = write(
        tmp_path,
        rules,
        """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series: [{series: 'temp{gpu="0"}', values: "90 90 stale"}]
    alert_rule_test:
      - {eval_time: 3m, alertname: quiet, exp_alerts: []}
      - {eval_time: 4m, alertname: quiet, exp_alerts: [{exp_labels: {gpu: "0"}}]}
""",
    )
    assert failures(path) == ""


# exp_alerts: firing only, pending when asked


def test_exp_alerts_lists_firing_alerts_and_pending_only_when_an_entry_asks(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT_FOR,
        """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series: [{series: 'temp{gpu="0"}', values: "90x5"}, {series: 'temp{gpu="1"}', values: "50 90x4"}]
    alert_rule_test:
      - {eval_time: 1m, alertname: hot, exp_alerts: []}
      - eval_time: 1m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}, exp_state: pending}, {exp_labels: {gpu: "1"}, exp_state: pending}]
      - eval_time: 2m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}}]
      - eval_time: 2m
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}}, {exp_labels: {gpu: "1"}, exp_state: pending}]
""",
    )
    assert failures(path) == ""


def test_once_pending_is_asked_for_every_pending_alert_must_be_listed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT_FOR,
        """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series: [{series: 'temp{gpu="0"}', values: "90x5"}, {series: 'temp{gpu="1"}', values: "90x5"}]
    alert_rule_test:
      - {eval_time: 1m, alertname: hot, exp_alerts: [{exp_labels: {gpu: "0"}, exp_state: pending}]}
""",
    )
    text = failures(path)
    assert '+ pending {gpu="1", metric="temp", severity="warning"}' in text
    assert "- " not in text


# labels: metric, severity, alertname


def test_metric_and_severity_are_compared_only_where_named_and_alertname_never(tmp_path: Path) -> None:
    ok = """
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series: [{series: 'temp{gpu="0"}', values: "90"}, {series: 'temp2{gpu="0"}', values: "90"}]
    alert_rule_test:
      - eval_time: 0s
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0", alertname: anything}}]
      - eval_time: 0s
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0", metric: temp, severity: critical}}]
"""
    assert failures(write(tmp_path, HOT, ok)) == ""
    named = 'gpu: "0", metric: temp, severity: critical'
    cases = {
        'gpu: "0", metric: temp2': '- firing {gpu="0", metric="temp2"}',
        'gpu: "0", severity: warning': '- firing {gpu="0", severity="warning"}',
        'gpu: "1"': '- firing {gpu="1"}',
    }
    for wrong, missing in cases.items():
        got = failures(write(tmp_path, HOT, ok.replace(named, wrong)))
        assert "alertname hot at eval_time 0s" in got, wrong
        assert missing in got, wrong
        assert '+ firing {gpu="0", metric="temp", severity="critical"}' in got, wrong


def test_two_alerts_that_differ_only_in_metric_match_two_entries_without_it(tmp_path: Path) -> None:
    rules = "rules:\n  - {name: hot, metric: ['temp*'], condition: '> 80'}\n"
    test = """
rule_files: [rules.yaml]
tests:
  - input_series: [{series: 'temp{gpu="0"}', values: "90"}, {series: 'temp2{gpu="0"}', values: "90"}]
    alert_rule_test:
      - eval_time: 0s
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}}, {exp_labels: {gpu: "0", metric: temp}}]
"""
    assert failures(write(tmp_path, rules, test)) == ""
    one = test.replace(', {exp_labels: {gpu: "0", metric: temp}}', "")
    assert '+ firing {gpu="0", metric="temp' in failures(write(tmp_path, rules, one))


def test_external_labels_are_not_alert_labels_as_in_promtool(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT,
        """
rule_files: [rules.yaml]
tests:
  - external_labels: {cluster: eu1}
    external_url: http://prom.example
    input_series: [{series: 'temp{gpu="0"}', values: "90"}]
    alert_rule_test: [{eval_time: 0s, alertname: hot, exp_alerts: [{exp_labels: {gpu: "0"}}]}]
""",
    )
    assert failures(path) == ""


# the evaluation grid


GRID = """
rule_files: [rules.yaml]
{ei}
tests:
  - interval: 30s
    input_series: [{{series: 'temp{{gpu="0"}}', values: "50 90x20"}}]
    alert_rule_test:
      - {{eval_time: 4m45s, alertname: hot, exp_alerts: {at_4m45}}}
      - {{eval_time: 5m, alertname: hot, exp_alerts: [{{exp_labels: {{gpu: "0"}}}}]}}
"""
FOR_4M = "rules:\n  - {name: hot, metric: temp, condition: '> 80', for: 4m}\n"


def test_eval_time_is_looked_at_on_the_evaluation_interval_grid(tmp_path: Path) -> None:
    """`for: 4m` from the sample at 30s ends at 4m30s, between two points of the default 1m grid: at
    eval_time 4m45s promtool (and alertd) look at 4m, when the alert was still pending."""
    path = write(tmp_path, FOR_4M, GRID.format(ei="", at_4m45="[]"))
    assert failures(path) == ""
    path = write(tmp_path, FOR_4M, GRID.format(ei="evaluation_interval: 1m", at_4m45='[{exp_labels: {gpu: "0"}}]'))
    got = failures(path)
    assert "alertname hot at eval_time 4m45s (the evaluation at 4m):" in got
    assert '- firing {gpu="0"}' in got and 'pending {gpu="0", metric="temp", severity="warning"}' in got


def test_an_evaluation_interval_of_0_is_the_default_1m_as_in_promtool(tmp_path: Path) -> None:
    path = write(tmp_path, FOR_4M, GRID.format(ei="evaluation_interval: 0s", at_4m45="[]"))
    assert failures(path) == ""


def test_a_finer_evaluation_interval_sees_the_alert_fire_between_the_minutes(tmp_path: Path) -> None:
    path = write(tmp_path, FOR_4M, GRID.format(ei="evaluation_interval: 15s", at_4m45='[{exp_labels: {gpu: "0"}}]'))
    assert failures(path) == ""


def test_interval_defaults_to_the_evaluation_interval_and_start_timestamp_shifts_both(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "rules:\n  - {name: hot, metric: temp, condition: '> 80', annotations: {summary: '{{ time }}'}}\n",
        """
rule_files: [rules.yaml]
evaluation_interval: 10s
tests:
  - start_timestamp: "2026-01-01T00:00:00Z"
    input_series: [{series: 'temp{gpu="0"}', values: "50 50 90"}]
    alert_rule_test:
      - {eval_time: 19s, alertname: hot, exp_alerts: []}
      - eval_time: 20s
        alertname: hot
        exp_alerts: [{exp_labels: {gpu: "0"}, exp_annotations: {summary: "2026-01-01T00:00:20Z"}}]
""",
    )
    assert failures(path) == ""


# what is refused, what is an error


def test_promql_expr_test_is_refused_while_the_alert_tests_decide_the_exit(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT,
        """
rule_files: [rules.yaml]
group_eval_order: [a, b]
tests:
  - name: wrong on purpose
    input_series: [{series: 'temp{gpu="0"}', values: "90"}]
    alert_rule_test: [{eval_time: 0s, alertname: hot, exp_alerts: []}]
    promql_expr_test:
      - {expr: temp > 5, eval_time: 0s, exp_samples: [{labels: 'temp{gpu="0"}', value: 90}]}
      - {expr: up, eval_time: 0s}
""",
    )
    done = alertd("test", path)
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "wrong on purpose" in done.stdout
    assert f"NOT RUN {path}: tests[0].promql_expr_test[1] ('up'): not run: alertd's rules are not PromQL" in done.stdout
    assert "note: " in done.stdout and "group_eval_order: accepted, and changes nothing" in done.stdout
    assert done.stdout.splitlines()[-1].endswith(
        "0 passed, 1 failed, 2 not run (promql_expr_test: alertd's rules are not PromQL)"
    )


def test_a_file_of_only_promql_expr_tests_fails_since_nothing_ran(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HOT,
        "rule_files: [rules.yaml]\ntests:\n  - promql_expr_test: [{expr: up, eval_time: 0s}]\n",
    )
    done = alertd("test", path)
    assert done.returncode == 1
    assert "0 passed, 0 failed, 1 not run" in done.stdout and "no alert test ran, so this file fails" in done.stdout


@pytest.mark.parametrize(
    ("test", "message"),
    [
        (
            "tests:\n  - input_series:\n    - {series: a, values: '1'}\n    - {series: b, values: '1'}\n"
            "    - {series: c, values: '1 x'}",
            "t.yaml:6: tests[0].input_series[2].values: can't read 'x'",
        ),
        ("tests:\n  - input_series: [{series: 'a{b=c}', values: '1'}]", "tests[0].input_series[0].series: can't read"),
        (
            "tests:\n  - promql_expr_tests: []",
            "tests[0].promql_expr_tests: unknown key 'promql_expr_tests' (did you mean 'promql_expr_test'?)",
        ),
        ("evaluation_intervall: 1m\ntests: [{}]", "evaluation_intervall: unknown key"),
        ("tests:\n  - alert_rule_test: [{eval_time: 1m}]", "tests[0].alert_rule_test[0].alertname: Field required"),
        (
            "tests:\n  - alert_rule_test: [{eval_time: 1m, alertname: a, exp_alerts: [{exp_state: resolved}]}]",
            "exp_state",
        ),
        ("group_eval_order: [a, a]\ntests: [{}]", "group_eval_order: group name repeated in evaluation order: a"),
        (
            "tests:\n  - input_series: [{series: a, values: '1 2', steps: '1e300 1'}]",
            "tests[0].input_series[0].steps: a step must fit in 64 bits",
        ),
        ("tests:\n  - input_series: [{series: a, values: '1 2', steps: '1'}]", "2 values but 1 steps"),
        ("tests:\n  - input_series: [{series: a, values: '1 2', steps: '1 stale'}]", "a step can't be stale"),
        (
            "tests:\n  - start_timestamp: yesterday",
            "t.yaml:3: tests[0].start_timestamp: expected Unix seconds or an RFC 3339 time",
        ),
    ],
)
def test_errors_name_their_place(tmp_path: Path, test: str, message: str) -> None:
    path = write(tmp_path, HOT, "rule_files: [rules.yaml]\n" + test + "\n")
    with pytest.raises(ConfigError) as err:
        run_test_file(path)
    assert message in str(err.value)


def test_an_error_in_a_test_file_is_printed_by_the_command(tmp_path: Path) -> None:
    path = write(tmp_path, HOT, "rule_files: [rules.yaml]\ntests:\n  - input_series: [{series: a, values: '1 +'}]\n")
    done = alertd("test", path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {path}:3: tests[0].input_series[0].values: can't read '+': " + (
        "use numbers, NaN, Inf, _, stale, a+bxN, a-bxN, axN, _xN or stalexN"
    )


def test_a_prometheus_rule_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "prom.yml").write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n")
    path = write(tmp_path, HOT, "rule_files: [prom.yml]\ntests: [{}]\n")
    with pytest.raises(ConfigError) as err:
        run_test_file(path)
    assert "a rule file has Prometheus' `groups:`: alertd test runs alertd's rules, not PromQL ones" in str(err.value)


def test_rule_files_are_globbed_relative_to_the_test_file(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.yaml").write_text(HOT)
    (tmp_path / "r" / "b.yaml").write_text("rules:\n  - {name: cold, metric: temp, condition: '< 10'}\n")
    test = """
rule_files: ['r/*.yaml']
tests:
  - input_series: [{series: 'temp{gpu="0"}', values: "5"}]
    alert_rule_test: [{eval_time: 0s, alertname: cold, exp_alerts: [{exp_labels: {gpu: "0"}}]}]
"""
    (tmp_path / "t.yaml").write_text(test)
    assert failures(str(tmp_path / "t.yaml")) == ""
    (tmp_path / "t.yaml").write_text(test.replace("r/*.yaml", "nothing/*.yaml"))
    with pytest.raises(ConfigError, match=r"rule_files\[0\]: no file matches 'nothing/\*.yaml'"):
        run_test_file(str(tmp_path / "t.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_rule_tests_pass(path: Path) -> None:
    done = alertd("test", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(" passed, 0 failed")
