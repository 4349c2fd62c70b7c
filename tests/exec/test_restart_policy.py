"""The restart policy as a table: how an attempt ended, which attempt it was -> restart at when, or why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from alertd.config import Config, load_config
from alertd.errors import ConfigError
from alertd.runs.restart import AttemptEnd, RestartPolicy

POLICY = RestartPolicy.of(["crashed", "lost"], max_restarts=3, backoff=30.0)
NOW = 1000.0


@pytest.mark.parametrize(
    ("end", "attempt", "restart", "ending", "why"),
    [
        (AttemptEnd(1), 1, True, "crashed", "restart 1 of 3"),
        (AttemptEnd(1), 3, True, "crashed", "restart 3 of 3"),
        (AttemptEnd(1), 4, False, "crashed", "gave up after 3 restarts (restart.max: 3)"),
        (AttemptEnd(-9), 1, True, "lost", "restart 1 of 3"),  # SIGKILL alertd did not send: the OOM killer
        (AttemptEnd(137), 2, True, "lost", "restart 2 of 3"),  # the same, through a shell
        (AttemptEnd(-15), 1, True, "lost", "restart 1 of 3"),
        (AttemptEnd(0), 1, False, "finished", "it finished"),
        (AttemptEnd(130), 1, False, "interrupted", "a user's interrupt is never restarted"),
        (AttemptEnd(-2), 1, False, "interrupted", "a user's interrupt is never restarted"),
        (AttemptEnd(1, interrupted=True), 1, False, "interrupted", "a user's interrupt is never restarted"),
        (AttemptEnd(-15, interrupted=True), 1, False, "interrupted", "a user's interrupt is never restarted"),
        (AttemptEnd(-15, stopped=True), 1, False, "stopped", "alertd stopped it: never restarted"),
        (AttemptEnd(1, stopped=True), 1, False, "stopped", "alertd stopped it: never restarted"),
        (AttemptEnd(0, stopped=True), 1, False, "stopped", "alertd stopped it: never restarted"),
        (
            AttemptEnd(1, events=frozenset({"traceback", "cuda_oom"})),
            1,
            False,
            "cuda_oom",
            "CUDA out of memory: a restart would run out again",
        ),
        (
            AttemptEnd(0, events=frozenset({"cuda_oom"})),
            1,
            False,
            "cuda_oom",
            "CUDA out of memory: a restart would run out again",
        ),
        (AttemptEnd(1, events=frozenset({"traceback", "nccl_timeout"})), 1, True, "crashed", "restart 1 of 3"),
    ],
)
def test_the_decision_table(end: AttemptEnd, attempt: int, restart: bool, ending: str, why: str) -> None:
    d = POLICY.decide(end, attempt, NOW)
    assert (d.restart, d.ending, d.why, d.attempt) == (restart, ending, why, attempt + 1)
    assert d.at == (NOW + 30.0 if restart else None)


@pytest.mark.parametrize(
    ("on", "status", "restart", "why"),
    [
        (["crashed"], 1, True, "restart 1 of 1"),
        (["crashed"], -9, False, "restart.on does not name lost"),
        (["lost"], -9, True, "restart 1 of 1"),
        (["lost"], 1, False, "restart.on does not name crashed"),
    ],
)
def test_on_names_the_endings_restarted(on: list[str], status: int, restart: bool, why: str) -> None:
    d = RestartPolicy.of(on, max_restarts=1, backoff=0.0).decide(AttemptEnd(status), 1, NOW)
    assert (d.restart, d.why) == (restart, why)
    assert d.at == (NOW if restart else None)


def test_max_0_never_restarts_and_1_restarts_once() -> None:
    assert (
        RestartPolicy.of(max_restarts=0).decide(AttemptEnd(1), 1, NOW).why
        == "gave up after 0 restarts (restart.max: 0)"
    )
    once = RestartPolicy.of(max_restarts=1)
    assert [once.decide(AttemptEnd(1), a, NOW).restart for a in (1, 2, 3)] == [True, False, False]
    assert once.decide(AttemptEnd(1), 2, NOW).why == "gave up after 1 restart (restart.max: 1)"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"on": ["finished"]}, "can't restart on finished: only on crashed and lost"),
        ({"max_restarts": -1}, "can't be negative"),
        ({"backoff": -1.0}, "can't be negative"),
    ],
)
def test_a_policy_that_can_t_be(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RestartPolicy.of(**kw)  # type: ignore[arg-type]


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_config([str(path)])


def test_the_exec_section_compiles_to_the_policy_and_the_ledger_s_directory(tmp_path: Path) -> None:
    config = load(tmp_path, "exec:\n  restart: {on: [crashed, lost], max: 3, backoff: 30s}\n  checkpoints: out\n")
    assert config.restart == RestartPolicy(frozenset({"crashed", "lost"}), 3, 30.0) and config.checkpoints == "out"
    assert load(tmp_path, "exec: {restart: {on: lost}}\n").restart == RestartPolicy(frozenset({"lost"}), 3, 30.0)
    assert load(tmp_path, "exec: {restart: {}}\n").restart == RestartPolicy()
    assert load(tmp_path, "rules: []\n").restart is None  # default: never restarted


def test_the_exec_section_s_errors_are_placed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, "rules: []\nexec:\n  restart: {on: [crashd], max: -1, backof: 3}\n")
    said = sorted((p.place, p.line, p.message) for p in exc.value.problems)
    assert [(place, line) for place, line, _ in said] == [
        ("exec.restart.backof", 3),
        ("exec.restart.max", 3),
        ("exec.restart.on[0]", 3),
    ]
    assert "did you mean 'backoff'" in said[0][2] and "'crashed' or 'lost'" in said[2][2]
