"""`recover`'s choice (`alertd.runs.recovery.decide`): the checkpoint, the skipped updates, the LR cut, the
widening on a repeat, the refusals. Tables of ledgers and incidents; nothing is read from disk."""

from __future__ import annotations

from typing import Any

import pytest

from alertd.runs.recovery import History, Incident, NoPlan, Plan, RecoverPolicy, decide


def ledger(*rows: tuple[int, bool, float]) -> list[dict[str, Any]]:
    """Ledger entries (step, finite, time): finite ones saved, the others vetoed."""
    return [
        {"step": s, "path": f"/out/checkpoint-{s}", "finite": f, "saved": f, "time": t, "by": "schedule"}
        for s, f, t in rows
    ]


EVERY_10 = ledger((10, True, 10.0), (20, True, 20.0), (30, True, 30.0), (40, False, 40.0))
ON_DISK = {"/out/checkpoint-10", "/out/checkpoint-20", "/out/checkpoint-30"}


def plan(policy: RecoverPolicy, incident: Incident, history: History | None = None, **kw: Any) -> Plan | NoPlan:
    entries = kw.pop("entries", EVERY_10)
    disk = kw.pop("disk", ON_DISK)
    return decide(policy, history or History(), incident, entries, lambda p: p in disk, **kw)


NAN_AT_40 = Incident("loss_not_finite", 40, 41.0, 1, "NaN")


@pytest.mark.parametrize(
    ("policy", "checkpoint", "skip", "factor"),
    [
        (RecoverPolicy(), 30, (31, 41), 0.5),  # the newest good one; through the update after the incident
        (RecoverPolicy(rollback=15), 20, (21, 41), 0.5),  # at least 15 steps before step 40
        (RecoverPolicy(skip=5, lr_scale=0.25), 30, (31, 35), 0.25),
        (RecoverPolicy(skip=0, lr_scale=1.0), 30, None, 1.0),
    ],
)
def test_the_checkpoint_the_skipped_updates_and_the_lr_factor(
    policy: RecoverPolicy, checkpoint: int, skip: tuple[int, int] | None, factor: float
) -> None:
    got = plan(policy, NAN_AT_40)
    assert isinstance(got, Plan)
    assert (got.attempt, got.checkpoint, got.checkpoint_step) == (2, f"/out/checkpoint-{checkpoint}", checkpoint)
    assert (got.skip, got.lr_factor) == (skip, factor)
    assert got.as_json("r", 50.0)["skip"] == (list(skip) if skip else [])


def test_a_checkpoint_rotated_away_or_saved_after_the_incident_is_not_chosen() -> None:
    assert plan(RecoverPolicy(), NAN_AT_40, disk={"/out/checkpoint-20"}).checkpoint_step == 20  # type: ignore[union-attr]
    late = Incident("loss_not_finite", 40, 25.0, 1)  # the incident came before checkpoint-30 was written
    assert plan(RecoverPolicy(), late).checkpoint_step == 20  # type: ignore[union-attr]


def test_no_finite_checkpoint_early_enough_is_refused_and_said_so() -> None:
    got = plan(RecoverPolicy(rollback=35), NAN_AT_40)
    assert got == NoPlan(
        "no checkpoint with finite weights at step 5 or before (the incident's step 40 less "
        "rollback 35) is in the ledger"
    )
    assert isinstance(plan(RecoverPolicy(), NAN_AT_40, entries=ledger((40, False, 40.0))), NoPlan)


def test_an_incident_at_about_the_same_step_again_widens_the_rollback_skip_and_lr_cut() -> None:
    policy = RecoverPolicy(rollback=5)
    first = plan(policy, NAN_AT_40)
    assert isinstance(first, Plan) and first.checkpoint_step == 30
    again = Incident("loss_not_finite", 42, 60.0, 2, "NaN")
    second = plan(policy, again, History().with_plan(first))
    assert isinstance(second, Plan)
    # rollback doubled, and older than the last plan's checkpoint: 20; skip through 43 and as long again.
    assert (second.attempt, second.checkpoint_step, second.skip, second.lr_factor) == (3, 20, (21, 66), 0.25)
    assert second.widened == 1 and "widened" in second.describe()


def test_an_incident_far_from_the_earlier_one_is_a_new_one() -> None:
    first = plan(RecoverPolicy(), NAN_AT_40)
    assert isinstance(first, Plan)
    entries = [*EVERY_10, *ledger((90, True, 90.0))]
    later = Incident("loss_not_finite", 95, 96.0, 2)
    got = plan(
        RecoverPolicy(), later, History().with_plan(first), entries=entries, disk=ON_DISK | {"/out/checkpoint-90"}
    )
    assert isinstance(got, Plan) and (got.checkpoint_step, got.lr_factor, got.widened) == (90, 0.5, 0)


def test_after_max_attempts_it_gives_up() -> None:
    history = History()
    policy = RecoverPolicy(max_attempts=2, near=0)
    for attempt, step in ((1, 40), (2, 60)):
        got = plan(policy, Incident("nan", step, 100.0, attempt), history)
        assert isinstance(got, Plan)
        history = history.with_plan(got)
    assert plan(policy, Incident("nan", 80, 100.0, 3), history) == NoPlan(
        "gave up after 2 recoveries (max_attempts: 2)", give_up=True
    )


def test_an_attempt_that_ran_out_of_cuda_memory_is_never_recovered() -> None:
    got = plan(RecoverPolicy(), NAN_AT_40, events={"cuda_oom", "traceback"})
    assert isinstance(got, NoPlan) and got.give_up and "cuda_oom" in got.why
    assert isinstance(plan(RecoverPolicy(give_up_on=frozenset()), NAN_AT_40, events={"cuda_oom"}), Plan)
