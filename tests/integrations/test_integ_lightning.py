"""alertd.integrations.lightning.AlertdCallback in real Lightning runs (one linear layer, CPU).

Two scripts run at once (see lightning_integ_run.py): `nan_crash` (phases nan, crash) and `stop` (phases
abort, stopfile, sigint), which the tests drive through its samples files.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from integ_helpers import Child, StopResult, drive_stop, dry_run, markers, number, series, start

from alertd.integrations.ledger import read

pytestmark = pytest.mark.slow

SCRIPT = "lightning_integ_run.py"
NAN_AT = 4  # lightning_integ_run.NAN_AT (0-based `global_step`, as Lightning counts)


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Child]]:
    """Both scripts, started together (each spends ~10 s importing)."""
    base = tmp_path_factory.mktemp("lightning")
    kids = {mode: start(SCRIPT, base / mode, mode) for mode in ("stop", "nan_crash")}
    yield kids
    for kid in kids.values():
        kid.kill()


@pytest.fixture(scope="module")
def stopped(children: dict[str, Child]) -> StopResult:
    """The `stop` script, driven through its phases."""
    return drive_stop(children["stop"])


@pytest.fixture(scope="module")
def nan_crash(children: dict[str, Child]) -> tuple[Child, int]:
    """The `nan_crash` script, run to its end, and its exit status."""
    child = children["nan_crash"]
    return child, child.wait_exit()


def assert_stopped(child: Child, phase: str, ckpt_dir: Path, requested_after: int, reason: str) -> None:
    """The phase stopped after the optimizer step following the request, saved a full checkpoint there, said why."""
    import torch

    samples = child.samples(phase)
    found = list((child.outdir / phase).rglob("alertd-stop-step=*.ckpt"))
    assert [p.parent for p in found] == [ckpt_dir], found
    n = int(found[0].stem.split("=")[1])  # trainer.global_step: the number of optimizer steps done
    last = max(series(samples, "train/loss"))  # the step `training_step` saw, 0-based
    # The request may land between the step's train/loss and the stop file's poll in the same batch end.
    assert requested_after <= last < 500 and n == last + 1, (requested_after, last, n)
    rule = {"rule": "loss_not_finite"} if reason == "stop_file" else {}
    assert markers(samples)[1:] == [
        ("run.stopped", 1.0, {"reason": reason, **rule, "checkpoint": str(found[0]), "saved": "true"}),
        ("run.crashed", 0.0, {}),
        ("run.finished", 1.0, {}),
    ]
    assert [s["step"] for s in samples if s["metric"] == "run.stopped"] == [n]
    # The checkpoint ledger, in default_root_dir: the stop's save first (ModelCheckpoint's, if any, after it).
    ledger = [(e["step"], e["path"], e["finite"], e["saved"], e["by"]) for e in read(child.outdir / phase)]
    assert ledger[0] == (n, str(found[0]), True, True, "stop")
    assert all(e[0] == n and e[2:4] == (True, True) and e[4] == "schedule" for e in ledger[1:]), ledger
    ckpt = torch.load(found[0], map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == n
    assert set(ckpt["state_dict"]) == {"layer.weight", "layer.bias"}
    assert ckpt["optimizer_states"] and "loops" in ckpt  # a full, resumable checkpoint
    assert f"alertd: stopping at step {n}, asked by " in child.log
    assert f"; checkpoint: {found[0]}\n" in child.log


def test_stop_file_saves_a_checkpoint_and_stops(children: dict[str, Child], stopped: StopResult) -> None:
    """No ModelCheckpoint: the checkpoint goes to default_root_dir; the stop file is then renamed."""
    child = children["stop"]
    phase_dir = child.outdir / "stopfile"
    assert_stopped(child, "stopfile", phase_dir, stopped.requested_after["stopfile"], "stop_file")
    assert "asked by stop file" in child.log and "(train/loss is NaN (a test))" in child.log
    assert not (phase_dir / "ALERTD_STOP").exists() and (phase_dir / "ALERTD_STOP.done").is_file()


def test_sigint_saves_a_checkpoint_and_exits_0(children: dict[str, Child], stopped: StopResult) -> None:
    """SIGINT: the checkpoint goes to the ModelCheckpoint's directory, trainer.should_stop ends fit, exit 0."""
    child = children["stop"]
    phase_dir = child.outdir / "sigint"
    assert_stopped(child, "sigint", phase_dir / "checkpoints", stopped.requested_after["sigint"], "SIGINT")
    assert "asked by signal SIGINT" in child.log
    assert stopped.exit_code == 0, child.log[-3000:]
    assert stopped.exit_seconds < 30
    assert "stopped cleanly" in child.log


def test_second_sigint_aborts_with_keyboard_interrupt(children: dict[str, Child], stopped: StopResult) -> None:
    """A first SIGINT during a long step is only a request; the second is Lightning's KeyboardInterrupt, which
    it reports to on_exception and turns into sys.exit(1)."""
    child = children["stop"]
    assert stopped.alive_after_first_sigint
    assert "Detected KeyboardInterrupt" in child.log and "abort: SystemExit(1)" in child.log
    samples = child.samples("abort")
    assert markers(samples) == [
        ("run.started", 1.0, {}),
        ("run.crashed", 1.0, {"exception": "KeyboardInterrupt"}),
        ("run.finished", 1.0, {}),
    ]
    assert [s["step"] for s in samples if s["metric"] == "run.crashed"] == [2]
    assert not list((child.outdir / "abort").rglob("*.ckpt"))


def test_raw_nan_loss_and_grad_norm_before_clipping(nan_crash: tuple[Child, int]) -> None:
    """The loss training_step returned (the mean of a step's 2 accumulated batches), NaN included, and the gradient
    norm before gradient_clip_val=1.0."""
    child, _ = nan_crash
    samples = child.samples("nan")
    logged = json.loads((child.outdir / "nan" / "logged.json").read_text())
    loss, grad_norm = series(samples, "train/loss"), series(samples, "train/grad_norm")
    assert sorted(loss) == sorted(grad_norm) == list(range(8))
    assert set(logged["batches"].values()) == {2}
    for step in range(8):
        want_loss, want_norm = number(logged["loss"][str(step)]), number(logged["grad_norm"][str(step)])
        if step < NAN_AT:
            assert loss[step] == pytest.approx(want_loss, rel=1e-6)
            assert grad_norm[step] == pytest.approx(want_norm, rel=1e-5)
        else:
            assert math.isnan(loss[step]) and math.isnan(want_loss)
            assert math.isnan(grad_norm[step]) and math.isnan(want_norm)
    assert max(grad_norm[s] for s in range(NAN_AT)) > 1.0  # above gradient_clip_val: not the clipped norm
    assert markers(samples) == [("run.started", 1.0, {}), ("run.crashed", 0.0, {}), ("run.finished", 1.0, {})]
    assert {(s["labels"]["run"], s["labels"]["host"], s["labels"]["pid"]) for s in samples} == {
        ("nan", socket.gethostname(), str(child.proc.pid))
    }


def test_crash_is_recorded_by_on_exception(nan_crash: tuple[Child, int]) -> None:
    """training_step raises RuntimeError at step 3: run.crashed = 1 with exception=RuntimeError; exit 1."""
    child, code = nan_crash
    assert code == 1
    assert "RuntimeError: raised by training_step at step 3" in child.log
    samples = child.samples("crash")
    assert markers(samples) == [
        ("run.started", 1.0, {}),
        ("run.crashed", 1.0, {"exception": "RuntimeError"}),
        ("run.finished", 1.0, {}),
    ]
    assert [s["step"] for s in samples if s["metric"] == "run.crashed"] == [3]
    assert max(series(samples, "train/loss")) == 2


def test_alertd_reads_the_samples_file(nan_crash: tuple[Child, int]) -> None:
    """alertd's own dry-run over the file fires loss_not_finite at the NaN step for train/loss."""
    child, _ = nan_crash
    transitions = dry_run(child.outdir / "nan" / "alertd-samples.jsonl")
    firing = {(t["rule"], t["labels"]["metric"]): t for t in transitions if t["state"] == "firing"}
    assert firing[("loss_not_finite", "train/loss")]["step"] == NAN_AT
    assert firing[("grad_norm_not_finite", "train/grad_norm")]["step"] == NAN_AT
