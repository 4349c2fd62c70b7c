"""The `alertd` command through a real subprocess: check, test and dry-run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from alertd.testing.tbwriter import ScalarWriter

T0 = 1780012800.0  # The start of examples/default_run.jsonl.


def alertd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alertd", *args], capture_output=True, text=True, timeout=120)


def test_check_accepts_the_default_rules() -> None:
    done = alertd("check", "rules/default.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("rules/default.yaml: ok (")


def test_check_names_an_unknown_key_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    metric: loss\n    condition: nonfinite\n    sevrity: critical\n")
    done = alertd("check", str(bad), "rules/default.yaml")
    assert done.returncode == 1
    assert (
        done.stdout.splitlines()[0]
        == f"error: {bad}:5: rules[0].sevrity: unknown key 'sevrity'; did you mean 'severity'? (the keys here: "
        "annotations, condition, consecutive, for, keep_firing_for, labels, labels_match, metric, name, notify, "
        "severity)"
    )
    assert "rules/default.yaml: ok" in done.stdout  # Every file is checked.


def test_check_warns_of_a_severity_no_route_uses_and_of_a_matcher_no_rule_has(tmp_path: Path) -> None:
    rules = tmp_path / "sev.yaml"
    rules.write_text(
        "notifiers: {console: {type: log}, pager: {type: log}}\n"
        "route:\n"
        "  receivers: [console]\n"
        "  routes:\n"
        "    - {match: {severity: critical}, receivers: [pager]}\n"
        "    - {matchers: ['severity=\"warnign\"'], receivers: [console]}\n"
        "rules:\n"
        "  - {name: loss_nan, metric: loss, condition: nonfinite, severity: critcal}\n"
        "  - {name: grad_high, metric: grad_norm, condition: '> 100', severity: warning}\n"
        "  - {name: gpu_hot, metric: gpu.temperature, condition: '> 83', severity: critical}\n"
    )
    done = alertd("check", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr  # warnings, not errors
    assert done.stdout.splitlines() == [
        f"warning: {rules}:8: rules[0].severity: severity 'critcal' is used by no route and no other rule; "
        "did you mean 'critical'?",
        f"warning: {rules}:6: route.routes[1].matchers[0]: no rule has severity 'warnign', so this matcher "
        "matches no alert (the rules have: critcal, critical, warning); did you mean 'warning'?",
        f"{rules}: ok (3 rules, 0 sources, 2 notifiers)",
    ]
    assert "warning:" not in alertd("check", "rules/default.yaml").stdout  # the shipped rules raise none


def test_check_reports_an_unset_variable_with_every_other_problem_and_suggests_names(tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text(
        "sources:\n"
        "  - {name: tb, type: tensorbord, logdir: ./runs}\n"
        "  - {name: logs, type: textlog, path: '${ALERTD_TEST_UNSET_VAR}'}\n"
        "notifiers: {chat: {type: webhok, url: 'http://127.0.0.1:9/'}}\n"
        "rules:\n"
        "  - {name: a, metric: loss, condition: '> 1', treshold: 3}\n"
        "  - {name: b, metric: loss, condition: {spikee: {ratio: 2}}}\n"
    )
    done = alertd("check", str(rules))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"error: {rules}:3: sources[1].path: environment variable ALERTD_TEST_UNSET_VAR is not set"
    assert lines[1].startswith(
        f"error: {rules}:2: sources[0].type: unknown source type 'tensorbord'; did you mean 'tensorboard'? "
        "(one of 'tensorboard', 'nvml', "
    )
    assert lines[2].startswith(
        f"error: {rules}:4: notifiers.chat.type: unknown notifier type 'webhok'; did you mean 'webhook'? (one of "
    )
    assert lines[3].startswith(
        f"error: {rules}:6: rules[0].treshold: unknown key 'treshold'; did you mean 'condition'?"
    )
    assert lines[4].startswith(
        f"error: {rules}:7: rules[1].condition: unknown condition 'spikee'; did you mean 'spike'?"
    )
    for kind in (
        "spike",
        "absent",
        "plateau",
        "zscore",
        "avg",
        "quantile",
        "stddev",
        "increasing",
        "expr",
        "nonfinite",
    ):
        assert f" {kind}," in lines[4], kind
    assert len(lines) == 5  # the emptied path is reported once, as the variable


def test_the_default_rule_tests_pass() -> None:
    done = alertd("test", "rules/tests/default_test.yaml")
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().endswith("passed, 0 failed")


def test_a_failing_rule_test_prints_a_diff_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("rules:\n  - {name: hot, metric: temp, condition: '> 80', for: 2m}\n")
    (tmp_path / "t.yaml").write_text(
        """
rule_files: [rules.yaml]
tests:
  - name: fires too early?
    interval: 1m
    input_series: [{series: 'temp{gpu="0"}', values: "90x5"}]
    alert_rule_test:
      - {eval_time: 1m, alertname: hot, exp_alerts: [{exp_labels: {metric: temp, gpu: "0"}}]}
"""
    )
    done = alertd("test", str(tmp_path / "t.yaml"))
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "fires too early?" in done.stdout
    assert '- firing {gpu="0", metric="temp"}' in done.stdout
    # exp_alerts lists firing alerts (promtool's meaning): the pending one is shown, not compared
    assert '      pending {gpu="0", metric="temp", severity="warning"}' in done.stdout


def test_dry_run_fires_every_default_rule_at_the_step_its_data_says() -> None:
    done = alertd(
        "dry-run", "--rules", "rules/default.yaml", "--source", "samples:examples/default_run.jsonl", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    first_firing: dict[str, dict] = {}  # type: ignore[type-arg]
    for x in lines:
        if x["state"] == "firing":
            first_firing.setdefault(x["rule"], x)
    expected_steps = {
        "grad_norm_exploding": 200,
        "loss_spike": 300,
        "throughput_drop": 350,
        "grad_norm_not_finite": 420,
        "loss_not_finite": 450,
        "val_metric_rising": 500,
        "val_loss_plateau": 450,
        "loss_diverging": 249,
        "run_stalled": 219,  # ddp-4 hung first (job_hung; inhibited at dispatch), gpt-small at step 520
        "run_finished": 530,
        "nan_in_log": 150,
        "loss_zeroed": 55,
        "run_lost": 50,
        "rank_straggler": 135,
        "rank_stalled": 299,
        "job_hung": 219,
    }
    expected_times = {
        "gpu_hot": 1300,
        "gpu_thermal_throttle": 1300,
        "gpu_hw_slowdown": 2060,
        "gpu_ecc_errors": 2500,
        "run_crashed": 4000,
        "nan_in_log": 4500,
        "loss_zeroed": 3550,
        "run_lost": 6500,
        "gpu_underutilized": 4800,
        "source_failing": 5130,
        "series_limit_reached": 5500,
        "state_not_saved": 5610,
        "gpu_lost": 6500,
        "run_stalled": 2790,  # ddp-4; gpt-small stalls at 5800
        "run_finished": 6190,
        "slurm_job_pending": 3900,
        "slurm_job_failed": 5200,
        "rank_straggler": 1350,  # rank 3 at 2x from 1000: its 2-minute mean reaches 1.5x the median at 1050, for 5m
        "rank_stalled": 3140,  # rank 2's last step at 2990, silent for 2 minutes, for 30 s
        "job_hung": 2790,  # every rank's last step at 2190, stall_after 10 minutes
    }
    from alertd.config import load_config

    assert set(first_firing) == {r.name for r in load_config(["rules/default.yaml"], {}).rules}
    for rule, step in expected_steps.items():
        assert first_firing[rule]["step"] == step, rule
    for rule, seconds in expected_times.items():
        from alertd.sources.samples import parse_time

        assert parse_time(first_firing[rule]["time"]) == T0 + seconds, rule
    nan = first_firing["loss_not_finite"]
    assert nan["value"] == "NaN" and nan["labels"] == {
        "host": "node1",
        "metric": "train/loss",
        "pid": "4242",
        "run": "gpt-small",
        "source": "tb",
    }
    assert [x["time"] for x in lines] == sorted(x["time"] for x in lines)
    # every default rule's summary reads well: over this data, and for a series of the same labels without steps
    rules = {r.name: r for r in load_config(["rules/default.yaml"], {}).rules}
    for x in lines:
        assert "<no value>" not in x["annotations"]["summary"], x
    for name, x in first_firing.items():
        for step in (None, 7):
            values = {"metric": x["labels"]["metric"], "value": 1.0, "step": step, "rule": name, "severity": "info"}
            ((_, template),) = rules[name].annotations
            text, problem = template.render(values, x["labels"])
            assert problem is None and "<no value>" not in text, (name, text)
            assert ("step 7" in text) == (step == 7 and "{{ step }}" in template.source), (name, text)


def test_dry_run_over_a_tensorboard_logdir(tmp_path: Path) -> None:
    writer = ScalarWriter(tmp_path / "exp1")
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 if step < 3 else math.inf, step, wall_time=T0 + step)
    writer.close()
    done = alertd("dry-run", "--rules", "rules/default.yaml", "--source", f"tensorboard:{tmp_path}", "--format", "json")
    assert done.returncode == 0, done.stderr
    (fired,) = [json.loads(x) for x in done.stdout.splitlines()]
    assert (fired["rule"], fired["state"], fired["step"], fired["value"]) == ("loss_not_finite", "firing", 3, "+Inf")
    assert fired["labels"]["run"] == "exp1" and fired["labels"]["source"] == "tb"
    assert fired["time"] == "2026-05-29T00:00:03Z"
    # the run directory itself as the logdir: its run is named by the directory, never "."
    done = alertd("dry-run", "--rules", "rules/default.yaml", "--source", f"tensorboard:{tmp_path / 'exp1'}")
    assert done.returncode == 0, done.stderr
    assert "run=exp1 " in done.stdout and "run=. " not in done.stdout, done.stdout


def test_dry_run_reports_bad_sample_lines_and_keeps_the_rest(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    good = {"metric": "loss", "labels": {"run": "a"}, "time": T0, "step": 1, "value": "NaN"}
    f.write_text("{oops\n" + json.dumps(good) + "\n" + json.dumps({**good, "value": "lots"}) + "\n")
    done = alertd("dry-run", "--rules", "rules/default.yaml", "--source", f"samples:{f}")
    assert done.returncode == 0
    assert f"{f}:1: skipped: not JSON" in done.stderr
    assert f"{f}:3: skipped: value must be a number" in done.stderr
    assert "FIRING   loss_not_finite" in done.stdout


def test_dry_run_into_a_reader_that_stops_early_ends_quietly_as_a_unix_filter(tmp_path: Path) -> None:
    """`alertd dry-run ... | head -1`: the reader goes away; alertd ends with 141 (SIGPIPE's status), no traceback.
    The output (3000 runs' NaN: about 400 kB) is more than a pipe holds, so alertd writes after the reader left."""
    lines = (
        json.dumps({"metric": "loss", "labels": {"run": f"r{i}"}, "time": 1e9 + i, "step": 1, "value": "NaN"})
        for i in range(3000)
    )
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "rules.yaml").write_text("rules:\n  - {name: nan, metric: loss, condition: nonfinite}\n")
    cmd = [sys.executable, "-m", "alertd", "dry-run", "--rules", str(tmp_path / "rules.yaml")]
    cmd += ["--source", f"samples:{tmp_path / 'runs.jsonl'}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141
    assert b"FIRING" in first and b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]
