"""The rules file: strict validation with places and lines, ${VAR} expansion, merging."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from alertd.config import load_config
from alertd.errors import ConfigError


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def problems(paths: list[str], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(paths, env or {})
    return [str(p) for p in info.value.problems]


def test_the_default_rules_load() -> None:
    cfg = load_config(["rules/default.yaml"], {})
    assert {r.name for r in cfg.rules} >= {"loss_not_finite", "gpu_hot", "run_stalled", "loss_spike"}
    assert [s.type for s in cfg.sources] == ["tensorboard", "nvml", "textlog"]
    assert cfg.sources[0].logdir == "./runs"  # type: ignore[union-attr]


def test_an_unknown_key_names_its_place_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "r.yaml", "rules:\n  - name: a\n    metric: loss\n    condition: nonfinite\n    treshold: 3\n"
    )
    assert problems([path]) == [
        f"{path}:5: rules[0].treshold: unknown key 'treshold'; did you mean 'condition'? (a threshold is a "
        "condition: `condition: '> 100'`; the keys here: annotations, condition, consecutive, for, keep_firing_for, "
        "labels, labels_match, metric, name, notify, severity)"
    ]


def test_a_typo_gets_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "r.yaml", "rules:\n  - {name: a, metric: loss, condition: nonfinite, severty: critical}\n")
    assert "did you mean 'severity'?" in problems([path])[0]


def test_every_error_is_reported_not_just_the_first(tmp_path: Path) -> None:
    text = """
sources:
  - {name: tb, type: tensorboard}
  - {name: x, type: nosuch}
rules:
  - {name: a, metric: loss, condition: "> x"}
  - {name: b, metric: loss, condition: {spike: {ratio: 0.5}}}
  - {name: c, metric: loss, condition: nonfinite, annotations: {summary: "{{ nope }}"}}
  - {name: d, metric: loss, condition: {absent: 10m}, consecutive: 3}
"""
    got = problems([write(tmp_path, "r.yaml", text)])
    places = [p.split(": ")[1] for p in got]
    assert places == [
        "sources[0].logdir",
        "sources[1].type",
        "rules[0].condition",
        "rules[1].condition.spike",
        "rules[2].annotations.summary",
        "rules[3]",
    ]
    assert "unknown condition '> x'" in got[2]
    assert "upward spike needs a ratio above 1" in got[3]
    assert "unknown name 'nope'" in got[4]


def test_a_yaml_syntax_error_has_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "r.yaml", "rules:\n  - name: a\n   metric: [loss\n")
    (msg,) = problems([path])
    assert msg.startswith(f"{path}:3: invalid YAML")


def test_a_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "r.yaml", "rules:\n  - name: a\n    name: b\n    metric: loss\n    condition: nonfinite\n")
    assert problems([path]) == [f"{path}:3: rules[0].name: duplicate key (first at line 2)"]


def test_environment_variables_expand_with_defaults(tmp_path: Path) -> None:
    text = (
        'sources:\n  - name: tb\n    type: tensorboard\n    logdir: "${LOGDIR:-/tmp/runs}"\n    interval: ${EVERY:-2}\n'
    )
    path = write(tmp_path, "r.yaml", text)
    assert load_config([path], {}).sources[0].logdir == "/tmp/runs"  # type: ignore[union-attr]
    cfg = load_config([path], {"LOGDIR": "/data", "EVERY": "5"})
    assert cfg.sources[0].logdir == "/data" and cfg.sources[0].interval == 5  # type: ignore[union-attr]


def test_an_unset_variable_without_default_is_named(tmp_path: Path) -> None:
    text = "notifiers:\n  chat: {type: webhook, format: slack, url: '${SLACK_URL}'}\n"
    path = write(tmp_path, "r.yaml", text)
    assert problems([path]) == [f"{path}:2: notifiers.chat.url: environment variable SLACK_URL is not set"]


def test_a_variable_cannot_change_the_structure(tmp_path: Path) -> None:
    path = write(tmp_path, "r.yaml", "sources:\n  - {name: tb, type: tensorboard, logdir: '${X}'}\n")
    cfg = load_config([path], {"X": "a}, evil: {b"})
    assert cfg.sources[0].logdir == "a}, evil: {b"  # type: ignore[union-attr]


def test_dollar_dollar_is_a_literal(tmp_path: Path) -> None:
    path = write(tmp_path, "r.yaml", "sources:\n  - {name: tb, type: tensorboard, logdir: '/x/$${HOME}'}\n")
    assert load_config([path], {}).sources[0].logdir == "/x/${HOME}"  # type: ignore[union-attr]


def test_files_merge_and_duplicates_are_errors(tmp_path: Path) -> None:
    a = write(
        tmp_path,
        "a.yaml",
        "notifiers: {console: {type: log}}\nrules:\n  - {name: r1, metric: loss, condition: nonfinite}\n",
    )
    b = write(tmp_path, "b.yaml", "rules:\n  - {name: r2, metric: loss, condition: '> 1'}\n")
    cfg = load_config([a, b], {})
    assert [r.name for r in cfg.rules] == ["r1", "r2"]
    c = write(tmp_path, "c.yaml", "rules:\n  - {name: r1, metric: x, condition: nonfinite}\n")
    assert problems([a, c]) == [f"{c}:2: rules[0].name: duplicate rule name 'r1' (first in {a} rules[0])"]


def test_a_receiver_that_is_not_defined_is_an_error(tmp_path: Path) -> None:
    text = """
notifiers: {console: {type: log}}
route: {receivers: [console], routes: [{match: {severity: critical}, receivers: [pager]}]}
rules:
  - {name: a, metric: loss, condition: nonfinite, notify: [slack]}
"""
    got = problems([write(tmp_path, "r.yaml", text)])
    assert any("rules[0].notify[0]: no notifier named 'slack' (defined: console)" in p for p in got)
    assert any("route.routes[0].receivers[0]: no notifier named 'pager'" in p for p in got)


def test_without_notifiers_alerts_go_to_the_console(tmp_path: Path) -> None:
    cfg = load_config([write(tmp_path, "r.yaml", "rules: []\n")], {})
    assert dict(cfg.notifiers).keys() == {"console"} and cfg.route.receivers == ["console"]


def test_a_baseline_longer_than_the_buffer_is_refused(tmp_path: Path) -> None:
    rule = "{name: s, metric: loss, condition: {spike: {ratio: 2, baseline: 50 samples}}}"
    text = f"buffer: {{max_samples: 20}}\nrules:\n  - {rule}\n"
    (msg,) = problems([write(tmp_path, "r.yaml", text)])
    assert "rules[0].condition: a baseline of 50 samples needs buffer.max_samples above it (now 20)" in msg


def test_durations(tmp_path: Path) -> None:
    text = "rules:\n  - {name: a, metric: g, condition: '< 40', for: 1h30m, keep_firing_for: 90}\n"
    (r,) = load_config([write(tmp_path, "r.yaml", text)], {}).rules
    assert (r.hold, r.keep_firing_for) == (5400.0, 90.0)
    bad = write(tmp_path, "bad.yaml", "rules:\n  - {name: a, metric: g, condition: '< 40', for: soon}\n")
    assert "expected a duration such as 30s, 5m or 1h" in problems([bad])[0]


def test_secrets_are_not_shown_in_a_dump(tmp_path: Path) -> None:
    from alertd.schema.types import redacted

    text = "notifiers:\n  chat: {type: webhook, format: slack, url: 'https://hooks.example/T000/SECRET'}\n"
    cfg = load_config([write(tmp_path, "r.yaml", text)], {})
    assert "SECRET" not in str(redacted(cfg.notifiers["chat"]))
    assert "SECRET" not in repr(cfg.notifiers["chat"])


@pytest.mark.parametrize(
    ("fragment", "message"),
    [
        ('{name: x, metric: m, condition: "> 1", for: .nan}', "rules[0].for: a duration must be a finite number"),
        ('{name: x, metric: m, condition: "> 1", for: .inf}', "rules[0].for: a duration must be a finite number"),
        ('{name: x, metric: m, condition: {op: ">", value: .nan}}', "rules[0].condition.value: value can't be NaN"),
        ('{name: x, metric: m, condition: {op: ">", value: [1]}}', "rules[0].condition.value: value must be a number"),
        ("{name: x, metric: m, condition: {absent: null}}", "rules[0].condition.absent: absent needs its duration"),
    ],
)
def test_odd_values_are_errors_with_their_place_never_tracebacks(tmp_path, fragment: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "r.yaml"
    path.write_text(f"rules:\n  - {fragment}\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(path)])
    assert str(err.value.problems[0]).startswith(f"{path}:2: {message}"), err.value.problems


def test_a_file_that_is_not_utf8_or_nested_too_deeply_is_one_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"rules:\n  - {name: x\xff, metric: m, condition: nonfinite}\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("rules: " + "[" * 5000 + "]" * 5000 + "\n")
    for path, message in ((latin, "the file is not UTF-8 text (byte 0xff at offset 19)"), (deep, "nested too deeply")):
        with pytest.raises(ConfigError) as err:
            load_config([str(path)])
        assert str(err.value.problems[0]).startswith(f"{path}:") and message in str(err.value.problems[0])


def test_every_condition_kind_the_message_lists_is_one_the_parser_takes() -> None:
    from alertd.config.conditions import CONDITIONS, condition_kinds, parse_condition
    from alertd.rules.conditions import AGGREGATES

    with pytest.raises(ValueError) as info:
        parse_condition({"spikey": {}})
    assert "did you mean 'spike'" in str(info.value)
    listed = str(info.value).split("(known: ")[1]
    specs = {
        "spike": {"ratio": 2},
        "absent": "5m",
        "expr": "a > b",
        "zscore": {},
        "plateau": {},
        "peers": {"by": ["run"], "silent": "1m"},
    }
    for kind in condition_kinds()[:-1]:
        assert f"{kind}," in listed
        if kind in CONDITIONS:
            if CONDITIONS[kind].word:
                parse_condition(kind)
            parse_condition({kind: specs.get(kind)})
        else:
            assert kind in AGGREGATES
            parse_condition({kind: {"over": 5, "q": 0.5 if kind == "quantile" else None}, "op": ">", "value": 1})
    assert {"spike", "absent", "plateau", "zscore", "expr", "avg", "stddev", "increasing"} <= set(condition_kinds())
    assert set(CONDITIONS) - {"threshold"} <= set(condition_kinds())  # the registry is what the message lists


@pytest.mark.parametrize(
    ("condition", "place", "message"),
    [
        ("{spike: {ratio: 2, baseline: 50 samples, directon: up}}", "rules[0].condition.spike.directon", "directon"),
        ("{spike: {direction: up}}", "rules[0].condition.spike.ratio", "Field required"),
        ("{spike: {ratio: 0.5}}", "rules[0].condition.spike", "upward spike needs a ratio above 1"),
        ("{absent: soon}", "rules[0].condition.absent", "soon"),
        ("{zscore: {threshold: -1}}", "rules[0].condition.zscore.threshold", "greater than 0"),
        ("{plateau: {mode: lowest}}", "rules[0].condition.plateau.mode", "'min' or 'max'"),
        ("{avg: {over: 5, q: 2}, op: '>', value: 1}", "rules[0].condition.avg.q", "less than or equal to 1"),
        ("{op: '=>', value: 1}", "rules[0].condition.op", "'<', '<=', '>', '>=', '==' or '!='"),
        ("{op: '>', value: .nan}", "rules[0].condition.value", "can't be NaN"),
        ("nonfinit", "rules[0].condition", "did you mean 'nonfinite'"),
        ("{plateu: {patience: 3}}", "rules[0].condition", "did you mean 'plateau'"),
        ("{absent: 5m, for: 1m}", "rules[0].condition", "one key"),
        ("{expr: 'loss >'}", "rules[0].condition.expr", "expr"),
    ],
)
def test_a_condition_s_mistake_names_its_place_inside_the_condition_and_its_line(
    tmp_path: Path, condition: str, place: str, message: str
) -> None:
    path = write(tmp_path, "r.yaml", f"rules:\n  - name: a\n    metric: loss\n    condition: {condition}\n")
    (got,) = problems([path])
    assert got.startswith(f"{path}:4: {place}: "), got
    assert message in got, got


def test_an_unset_variable_does_not_hide_the_file_s_other_problems(tmp_path: Path) -> None:
    text = "sources:\n  - {name: tb, type: tensorboard, logdir: '${NOPE}'}\nrules:\n  - {name: a, metric: m}\n"
    path = write(tmp_path, "r.yaml", text)
    assert problems([path]) == [
        f"{path}:2: sources[0].logdir: environment variable NOPE is not set",
        f"{path}:4: rules[0].condition: Field required",
    ]


def test_an_emptied_value_is_reported_once_as_its_variable_and_other_keys_still_are(tmp_path: Path) -> None:
    text = "rules:\n  - {name: a, metric: '${NOPE}', condition: nonfinite}\n  - {name: b, metric: m, condition: '>'}\n"
    path = write(tmp_path, "r.yaml", text)
    got = problems([path])
    assert got[0] == f"{path}:2: rules[0].metric: environment variable NOPE is not set"
    assert [p.split(": ")[1] for p in got[1:]] == ["rules[1].condition"]


@pytest.mark.parametrize("first", ["alertd.notify.config", "alertd.sources.config", "alertd.dispatch.route_config"])
def test_the_config_package_s_names_resolve_whatever_model_is_imported_first(first: str) -> None:
    """The sources', notifiers' and routes' models use `alertd.schema.types` while `alertd.config` uses them: any
    of them imported first (a fresh interpreter) loads, and every name `alertd.config` offers resolves."""
    code = f"import {first}\nimport alertd.config as c\nfor name in c.__all__: getattr(c, name)\nprint(len(c.__all__))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    import alertd.config

    assert done.stdout.strip() == str(len(alertd.config.__all__))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        alertd.config.nope  # noqa: B018
