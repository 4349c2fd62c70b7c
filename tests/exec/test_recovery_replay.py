"""The dry-run's recoveries (`alertd.runs.recovery_replay`): which FIRING transitions reach a `recover` notifier,
the run's history across them (attempts, widening), refusals and the give-up; then `alertd dry-run` end to end
over a real samples file and a hand-written ledger (text, JSON, --checkpoints, --plot)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alertd.dispatch.matchers import parse_matchers
from alertd.dispatch.routes import Route
from alertd.model import Transition, TransitionKind, make_labels
from alertd.runs.recovery import NoPlan, Plan, RecoverPolicy
from alertd.runs.recovery_replay import Replayed, replay_recoveries, route_receivers

T0 = 1_717_000_000.0
FIRING, RESOLVED = TransitionKind.FIRING, TransitionKind.RESOLVED


def ledger(*steps: int, bad: Sequence[int] = ()) -> list[dict[str, Any]]:
    return [
        {"step": s, "path": f"/out/checkpoint-{s}", "time": T0 + s, "finite": s not in bad, "saved": s not in bad}
        for s in steps
    ]


def tr(step: int, state: TransitionKind = FIRING, rule: str = "loss_not_finite", run: str = "r1") -> Transition:
    labels = make_labels({"metric": "train/loss", "run": run, "source": "rec"})
    return Transition(rule, state, T0 + step, step, float("nan"), labels, "critical")


ROUTE = Route(
    receivers=("console",),
    children=(Route(matchers=parse_matchers('alertname="loss_not_finite"'), receivers=("back",), key="{}/0"),),
)
LEDGERS = {"r1": ledger(10, 20, 30, 40, bad=(40,)), "r2": ledger(50)}


def replayed(
    transitions: Sequence[Transition],
    policy: RecoverPolicy | None = None,
    ledgers: Mapping[str, list[dict[str, Any]] | str] = LEDGERS,
) -> list[Replayed]:
    policies = {"back": policy or RecoverPolicy(rollback=5)}
    return replay_recoveries(transitions, route_receivers(ROUTE), policies, lambda _n, _s, run: ledgers[run])


def test_only_a_firing_the_route_sends_to_recover_gets_a_plan() -> None:
    got = replayed([tr(40), tr(41, RESOLVED), tr(45, rule="grad_norm_exploding")])
    assert [(r.notifier, r.rule, r.step, r.run) for r in got] == [("back", "loss_not_finite", 40, "r1")]
    plan = got[0].plan
    assert plan is not None and (plan.attempt, plan.checkpoint_step, plan.skip, plan.lr_factor) == (
        2,
        30,
        (31, 41),
        0.5,
    )
    assert (
        got[0].text()
        == "  -> recover back: attempt 2: back to /out/checkpoint-30 (step 30), updates 31-41 skipped, LR x0.5"
    )
    body = got[0].as_json()
    assert body["plan"]["checkpoint"] == "/out/checkpoint-30" and body["plan"]["skip"] == [31, 41]
    assert (body["refused"], body["give_up"], body["run"], body["source"]) == (None, False, "r1", "rec")


def test_a_rules_own_notify_list_reaches_recover_without_the_route() -> None:
    t = Transition("other", FIRING, T0 + 40, 40, 1.0, make_labels({"run": "r1"}), "", notify=("back",))
    assert [r.notifier for r in replayed([t])] == ["back"]


def test_a_repeat_near_the_same_step_widens_and_counts_the_attempts_per_run() -> None:
    got = replayed([tr(40), tr(41, RESOLVED), tr(60, run="r2"), tr(42), tr(43, RESOLVED)])
    plans = [r.plan for r in got]
    assert all(p is not None for p in plans)
    first, other_run, again = (p for p in plans if p is not None)
    assert (first.attempt, first.widened) == (2, 0)
    assert (other_run.attempt, other_run.checkpoint_step) == (2, 50)  # a run of its own history
    assert (again.attempt, again.incident.attempt, again.checkpoint_step, again.lr_factor) == (3, 2, 20, 0.25)
    assert again.widened == 1 and "widened" in got[2].text()


def test_refusals_and_the_give_up() -> None:
    refused = replayed([tr(40)], RecoverPolicy(rollback=35))[0]
    assert isinstance(refused.outcome, NoPlan) and not refused.outcome.give_up
    assert refused.text().startswith("  -> recover back: REFUSED: no checkpoint with finite weights at step 5")
    assert refused.as_json()["plan"] is None and "step 5" in refused.as_json()["refused"]
    no_ledger = replayed([tr(40)], ledgers={"r1": "no checkpoint ledger at /x"})[0]
    assert no_ledger.as_json()["refused"] == "no checkpoint ledger at /x"
    got = replayed([tr(20), tr(21, RESOLVED), tr(40), tr(41, RESOLVED), tr(45)], RecoverPolicy(max_attempts=1, near=0))
    assert isinstance(got[0].outcome, Plan)
    assert got[1].text() == "  -> recover back: GAVE UP: gave up after 1 recovery (max_attempts: 1)"
    assert got[1].as_json()["give_up"] is True
    assert got[2].outcome == NoPlan("the run was stopped for good already (loss_not_finite at step 40)", give_up=True)


def test_a_second_recover_notifier_for_the_same_firing_is_refused() -> None:
    route = Route(receivers=("back", "again"))
    policies = {"back": RecoverPolicy(), "again": RecoverPolicy()}
    got = replay_recoveries([tr(40)], route_receivers(route), policies, lambda *_: LEDGERS["r1"])
    assert isinstance(got[0].outcome, Plan)
    assert got[1].outcome == NoPlan("a recovery of attempt 1 is under way already")


# -- alertd dry-run, end to end ------------------------------------------------------------------------------

RULES = """
sources:
  - {name: rec, type: samples, path: run.jsonl}
notifiers:
  back: {type: recover, rollback: 5}
  console: {type: log}
route:
  receivers: [console]
  routes:
    - matchers: ['alertname="loss_not_finite"']
      receivers: [back]
rules:
  - {name: loss_not_finite, metric: train/loss, condition: nonfinite, severity: critical}
"""


def recorded(where: Path) -> Path:
    """A run whose loss is NaN at steps 40 and 42, and its ledger (checkpoints 10, 20, 30; 40 vetoed)."""
    with (where / "run.jsonl").open("w") as f:
        for s in range(60):
            value = "NaN" if s in (40, 42) else 1.0 / (s + 1)
            f.write(
                json.dumps({"metric": "train/loss", "labels": {"run": "r1"}, "time": T0 + s, "step": s, "value": value})
            )
            f.write("\n")
    (where / "alertd-checkpoints.jsonl").write_text("".join(json.dumps(e) + "\n" for e in LEDGERS["r1"]))
    rules = where / "rules.yaml"
    rules.write_text(RULES)
    return rules


def dry_run(where: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "alertd", "dry-run", "--rules", "rules.yaml", "--quiet", *args],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_dry_run_says_which_checkpoint_each_recovery_would_have_chosen(tmp_path: Path) -> None:
    recorded(tmp_path)
    lines = dry_run(tmp_path).splitlines()
    assert (
        lines[1] == "  -> recover back: attempt 2: back to /out/checkpoint-30 (step 30), updates 31-41 skipped, LR x0.5"
    )
    assert "FIRING" in lines[0] and "step=40" in lines[0]
    assert lines[4].startswith("  -> recover back: attempt 3: back to /out/checkpoint-20 (step 20), updates 21-66")
    assert "LR x0.25 (widened" in lines[4]

    out = [json.loads(line) for line in dry_run(tmp_path, "--format", "json").splitlines()]
    recover = [o["recover"] for o in out if "recover" in o]
    assert [(r["notifier"], r["rule"], r["step"], r["run"]) for r in recover] == [
        ("back", "loss_not_finite", 40, "r1"),
        ("back", "loss_not_finite", 42, "r1"),
    ]
    assert recover[0]["plan"]["checkpoint_step"] == 30 and recover[0]["plan"]["skip"] == [31, 41]
    assert recover[1]["plan"]["attempt"] == 3 and recover[1]["refused"] is None and recover[1]["give_up"] is False
    assert "recover" in out[1] and out[0]["state"] == "firing"  # right after its transition

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "alertd-checkpoints.jsonl").write_text(json.dumps(ledger(10)[0]) + "\n")
    text = dry_run(tmp_path, "--checkpoints", str(elsewhere), "--plot", "run.svg")
    assert "  -> recover back: attempt 2: back to /out/checkpoint-10 (step 10)" in text
    svg = (tmp_path / "run.svg").read_text()
    assert 'class="recovery-checkpoint"' in svg and 'data-step="10"' in svg
    assert 'class="recovery-skip"' in svg and 'data-from="11" data-to="41"' in svg
    missing = dry_run(tmp_path, "--checkpoints", str(tmp_path / "none"))
    assert f"REFUSED: no checkpoint ledger at {tmp_path / 'none' / 'alertd-checkpoints.jsonl'}" in missing
