"""NaN weights never enter the rotated checkpoints: real HF Trainer and Lightning runs whose loss turns NaN.

Two scripts run at once (the `guard` modes of hf_integ_run.py and lightning_integ_run.py): each saves a checkpoint
every 10 steps keeping only the newest (HF `save_total_limit=1`; Lightning `ModelCheckpoint(save_top_k=1,
save_last=True)` without a monitor), and its loss turns NaN, which (backpropagated, clipped, stepped on) makes
the weights and Adam's moments NaN. Left alone, the framework would save the NaN weights and delete the last
good checkpoint; alertd's stop would save NaN weights too. The test asks each run to stop, as alertd does, once
it sees the NaN loss in the samples file, and then looks at what is left on disk.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integ_helpers import Child, markers, series, start, write_stop_file

from alertd.integrations.ledger import LEDGER_NAME, last_good, read

pytestmark = pytest.mark.slow

HF_NAN_AT = {"savestep": 40, "between": 42}  # hf_integ_run.GUARD_NAN_AT: 1-based steps
LIGHTNING_NAN_AT = 39  # lightning_integ_run.GUARD_NAN_AT: the 0-based step training_step sees; NaN weights from 40


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Child]]:
    """Both scripts, started together."""
    base = tmp_path_factory.mktemp("guard")
    kids = {
        "hf": start("hf_integ_run.py", base / "hf", "guard"),
        "lightning": start("lightning_integ_run.py", base / "lightning", "guard"),
    }
    yield kids
    for kid in kids.values():
        kid.kill()


def nan_loss(child: Child, phase: str) -> bool:
    """The phase's samples file has two NaN train/loss: the stop asked now comes after the first NaN step, even
    if it lands between the second's train/loss and its poll for a stop request."""
    return sum(math.isnan(v) for v in series(child.samples(phase), "train/loss").values()) >= 2


def ended(child: Child, phase: str) -> bool:
    """The phase wrote run.finished."""
    return any(m[0] == "run.finished" for m in markers(child.samples(phase)))


@pytest.fixture(scope="module")
def hf(children: dict[str, Child]) -> Child:
    """The HF script: savestep stopped by SIGINT, between by the stop file, each once its loss is NaN."""
    child = children["hf"]
    child.wait_until("NaN losses in phase savestep", lambda: nan_loss(child, "savestep"))
    child.interrupt()
    child.wait_until("the end of phase savestep", lambda: ended(child, "savestep"))
    child.wait_until("NaN losses in phase between", lambda: nan_loss(child, "between"))
    write_stop_file(child.outdir / "between" / "ALERTD_STOP", "loss_not_finite", "train/loss is NaN")
    assert child.wait_exit() == 0, child.log[-3000:]
    assert "stopped cleanly" in child.log
    return child


@pytest.fixture(scope="module")
def lightning(children: dict[str, Child]) -> Child:
    """The Lightning script, stopped by SIGINT once its loss is NaN."""
    child = children["lightning"]
    child.wait_until("NaN losses in phase guard", lambda: nan_loss(child, "guard"))
    child.interrupt()
    assert child.wait_exit() == 0, child.log[-3000:]
    assert "stopped cleanly" in child.log
    return child


def all_finite(value: Any) -> bool:
    """Every floating tensor in a (nested) checkpoint structure is finite; there is at least one."""
    import torch

    found: list[bool] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                found.append(bool(torch.isfinite(v).all()))
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item)

    walk(value)
    return bool(found) and all(found)


def stop_sample(child: Child, phase: str) -> dict[str, Any]:
    """The phase's one run.stopped sample."""
    (stopped,) = [s for s in child.samples(phase) if s["metric"] == "run.stopped"]
    return stopped


def ledger(directory: Path) -> list[tuple[int, str, bool, bool, str]]:
    """The ledger's entries as (step, file name, finite, saved, by); every path is absolute, in `directory`'s tree."""
    entries = read(directory)
    assert entries, f"no {LEDGER_NAME} in {directory}"
    for e in entries:
        assert os.path.isabs(e["path"]) and Path(e["path"]).is_relative_to(directory), e
        assert isinstance(e["time"], float)
    return [(e["step"], Path(e["path"]).name, e["finite"], e["saved"], e["by"]) for e in entries]


def assert_hf_checkpoint_finite(ckpt: Path, step: int) -> None:
    """The Trainer's checkpoint: its model's and its optimizer's tensors all finite, at `step`."""
    import json

    import torch
    from safetensors.torch import load_file

    assert all_finite(load_file(str(ckpt / "model.safetensors")))
    optimizer = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)
    assert optimizer["state"] and all_finite(optimizer["state"])  # AdamW's moments, there and finite
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == step


@pytest.mark.parametrize(("phase", "good"), [("savestep", 30), ("between", 40)])
def test_hf_nan_weights_are_never_saved_and_the_last_good_checkpoint_stays(hf: Child, phase: str, good: int) -> None:
    """savestep: the weights turn NaN at step 40, a save step: the Trainer's own checkpoint-40 is vetoed (so is its
    rotation, which would delete checkpoint-30), and so is the save of alertd's stop (SIGINT) a step or two later.
    between: NaN from step 42, after the good checkpoint-40; the stop (stop file) saves nothing. Either way the
    last good checkpoint is all that is left, the ledger says what happened, and run.stopped names it."""
    out = hf.outdir / phase
    good_dir = out / f"checkpoint-{good}"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [good_dir.name]
    assert_hf_checkpoint_finite(good_dir, good)

    stopped = stop_sample(hf, phase)
    n = stopped["step"]
    assert HF_NAN_AT[phase] < n < 1000, n  # stopped long before its 2,000 steps
    reason = {"savestep": {"reason": "SIGINT"}, "between": {"reason": "stop_file", "rule": "loss_not_finite"}}[phase]
    assert markers(hf.samples(phase))[1:] == [
        ("run.stopped", 1.0, {**reason, "checkpoint": str(good_dir), "saved": "false"}),
        ("run.crashed", 0.0, {}),
        ("run.finished", 1.0, {}),
    ]
    assert max(series(hf.samples(phase), "train/loss")) == n  # it stopped there

    saved = [(s, f"checkpoint-{s}", True, True, "schedule") for s in range(10, good + 1, 10)]
    vetoed = [(s, f"checkpoint-{s}", False, False, "schedule") for s in range(good + 10, n, 10)]
    assert ledger(out) == [*saved, *vetoed, (n, f"checkpoint-{n}", False, False, "stop")]
    assert last_good(out) == {**read(out)[len(saved) - 1]}
    assert last_good(out)["path"] == str(good_dir)  # type: ignore[index]

    first_veto = good + 10
    if first_veto < n:
        assert (
            f"alertd: step {first_veto}: weights not finite, checkpoint-{first_veto} not saved; "
            f"the last good checkpoint is {good_dir}" in hf.log
        )
    why = "signal SIGINT" if phase == "savestep" else f"stop file {out / 'ALERTD_STOP'} (train/loss is NaN)"
    assert (
        f"alertd: stopping at step {n}, asked by {why}; weights not finite, no checkpoint saved; "
        f"the last good checkpoint is {good_dir}" in hf.log
    )


def test_hf_a_nan_save_step_is_vetoed_before_any_stop(hf: Child) -> None:
    """Step 40 is both the first NaN step and a save step: the veto happens at step 40 itself, before the stop."""
    out = hf.outdir / "savestep"
    assert (40, "checkpoint-40", False, False, "schedule") in ledger(out)
    assert "alertd: step 40: weights not finite, checkpoint-40 not saved; the last good checkpoint is " in hf.log
    assert stop_sample(hf, "savestep")["step"] > 40


def test_lightning_nan_weights_are_never_saved_and_the_last_good_checkpoint_stays(lightning: Child) -> None:
    """ModelCheckpoint(every_n_train_steps=10, save_top_k=1, save_last=True): at global step 40, the first with NaN
    weights, neither the top-k save (which would delete step=30) nor last.ckpt is written; alertd's stop saves no
    alertd-stop-step=N.ckpt. The step-30 checkpoints remain, with finite weights and Adam state."""
    import torch

    out = lightning.outdir / "guard"
    ckpts = out / "checkpoints"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ckpt")) == [
        "checkpoints/epoch=0-step=30.ckpt",
        "checkpoints/last.ckpt",
    ]
    for path in ckpts.glob("*.ckpt"):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        assert ckpt["global_step"] == 30, path
        assert all_finite(ckpt["state_dict"]), path
        (optimizer,) = ckpt["optimizer_states"]
        assert optimizer["state"] and all_finite(optimizer["state"]), path

    stopped = stop_sample(lightning, "guard")
    n = stopped["step"]
    assert LIGHTNING_NAN_AT + 1 < n < 1000, n  # (the HF run is driven first: this one may go on a while)
    assert markers(lightning.samples("guard"))[1:] == [
        ("run.stopped", 1.0, {"reason": "SIGINT", "checkpoint": str(ckpts / "last.ckpt"), "saved": "false"}),
        ("run.crashed", 0.0, {}),
        ("run.finished", 1.0, {}),
    ]

    expected: list[tuple[int, str, bool, bool, str]] = []
    for s in range(10, 40, 10):
        expected += [(s, f"epoch=0-step={s}.ckpt", True, True, "schedule"), (s, "last.ckpt", True, True, "schedule")]
    for s in range(40, n + 1, 10):
        if s == n:  # alertd's callback runs before the ModelCheckpoint's
            expected.append((n, f"alertd-stop-step={n}.ckpt", False, False, "stop"))
        vetoed = [(s, f"epoch=0-step={s}.ckpt", False, False, "schedule"), (s, "last.ckpt", False, False, "schedule")]
        expected += vetoed
    if n % 10:
        expected.append((n, f"alertd-stop-step={n}.ckpt", False, False, "stop"))
    assert ledger(out) == expected
    assert last_good(out)["path"] == str(ckpts / "last.ckpt")  # type: ignore[index]

    assert (
        f"alertd: step 40: weights not finite, epoch=0-step=40.ckpt not saved; "
        f"the last good checkpoint is {ckpts / 'last.ckpt'}" in lightning.log
    )
    assert (
        f"alertd: stopping at step {n}, asked by signal SIGINT; weights not finite, no checkpoint saved; "
        f"the last good checkpoint is {ckpts / 'last.ckpt'}" in lightning.log
    )
