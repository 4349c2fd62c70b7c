"""alertd.integrations.transformers.AlertdCallback in real Hugging Face Trainer runs (tiny GPT-2, CPU).

Two scripts run at once (see hf_integ_run.py): `nan_crash` (phases nan, caught, crash) and `stop` (phases
abort, stopfile, sigint), which the tests drive through its samples files.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from integ_helpers import Child, StopResult, drive_stop, dry_run, markers, series, start

from alertd.integrations.ledger import last_good, read

pytestmark = pytest.mark.slow

SCRIPT = "hf_integ_run.py"
NAN_AT = 4  # hf_integ_run.NAN_AT (1-based, as the Trainer counts steps)


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Child]]:
    """Both scripts, started together (each spends ~8 s importing)."""
    base = tmp_path_factory.mktemp("hf")
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


def checkpoint_of(phase_dir: Path) -> tuple[int, Path]:
    """The one `checkpoint-N` directory of a phase."""
    found = sorted(phase_dir.glob("checkpoint-*"))
    assert len(found) == 1, found
    return int(found[0].name.split("-")[1]), found[0]


def assert_stopped(child: Child, phase: str, requested_after: int, reason: str) -> int:
    """The phase stopped at the step boundary after the request, saved its checkpoint there, and said why."""
    samples = child.samples(phase)
    n, ckpt = checkpoint_of(child.outdir / phase)
    # The request may land between the step's train/loss and the stop file's poll in the same on_step_end.
    assert requested_after <= n < 500, (requested_after, n)
    assert max(series(samples, "train/loss")) == n  # no step after the one it stopped at
    rule = {"rule": "loss_not_finite"} if reason == "stop_file" else {}
    assert markers(samples)[1:] == [
        ("run.stopped", 1.0, {"reason": reason, **rule, "checkpoint": str(ckpt), "saved": "true"}),
        ("run.crashed", 0.0, {}),
        ("run.finished", 1.0, {}),
    ]
    assert [s["step"] for s in samples if s["metric"] == "run.stopped"] == [n]
    # The checkpoint ledger: the stop's save, finite weights; the one to roll back to.
    (entry,) = read(child.outdir / phase)
    assert {k: entry[k] for k in ("step", "path", "finite", "saved", "by", "framework")} == {
        "step": n,
        "path": str(ckpt),
        "finite": True,
        "saved": True,
        "by": "stop",
        "framework": "hf",
    }
    assert last_good(child.outdir / phase) == entry
    # The Trainer's own, complete, resumable checkpoint.
    assert (ckpt / "model.safetensors").stat().st_size > 0
    assert (ckpt / "optimizer.pt").is_file() and (ckpt / "scheduler.pt").is_file()
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == n
    from safetensors import safe_open

    with safe_open(str(ckpt / "model.safetensors"), "np") as f:
        assert "transformer.wte.weight" in set(f.keys())
    assert f"alertd: stopping at step {n}, asked by " in child.log
    assert f"; checkpoint: {ckpt}\n" in child.log
    return n


def test_stop_file_saves_a_checkpoint_and_stops(children: dict[str, Child], stopped: StopResult) -> None:
    """save_strategy="no", and still the Trainer saves checkpoint-N when the stop file appears; the file is then
    renamed so that a run resumed there does not stop at once."""
    child = children["stop"]
    assert_stopped(child, "stopfile", stopped.requested_after["stopfile"], "stop_file")
    assert "asked by stop file" in child.log and "(train/loss is NaN (a test))" in child.log
    assert not (child.outdir / "stopfile" / "ALERTD_STOP").exists()
    assert (child.outdir / "stopfile" / "ALERTD_STOP.done").is_file()


def test_sigint_saves_a_checkpoint_and_exits_0(children: dict[str, Child], stopped: StopResult) -> None:
    """SIGINT, the first signal alertd's kill notifier sends: checkpoint-N, train() returns, exit 0, quickly."""
    child = children["stop"]
    assert_stopped(child, "sigint", stopped.requested_after["sigint"], "SIGINT")
    assert "asked by signal SIGINT" in child.log
    assert stopped.exit_code == 0, child.log[-3000:]
    assert stopped.exit_seconds < 30
    assert "stopped cleanly" in child.log


def test_second_sigint_aborts_with_keyboard_interrupt(children: dict[str, Child], stopped: StopResult) -> None:
    """A first SIGINT during a long step is only a request; the second raises KeyboardInterrupt at once."""
    child = children["stop"]
    assert stopped.alive_after_first_sigint
    assert "abort: KeyboardInterrupt" in child.log
    samples = child.samples("abort")
    assert markers(samples) == [
        ("run.started", 1.0, {}),
        ("run.crashed", 1.0, {"exception": "KeyboardInterrupt"}),
        ("run.finished", 1.0, {}),
    ]
    assert [s["step"] for s in samples if s["metric"] == "run.crashed"] == [3]
    assert not list((child.outdir / "abort").glob("checkpoint-*"))


def test_raw_nan_loss_is_recorded_where_the_trainer_logs_0(nan_crash: tuple[Child, int]) -> None:
    """The Trainer (logging_nan_inf_filter=True) logs loss 0.0 for a NaN step; the samples file has the NaN. With
    gradient accumulation the step's loss is the one the Trainer logs: its micro-batches' losses, added up."""
    child, _ = nan_crash
    samples = child.samples("nan")
    history = json.loads((child.outdir / "nan" / "trainer_state.json").read_text())["log_history"]
    logged = {h["step"]: h for h in history if "loss" in h}
    loss, grad_norm = series(samples, "train/loss"), series(samples, "train/grad_norm")
    assert sorted(loss) == sorted(grad_norm) == list(range(1, 9))
    for step in range(1, 9):
        if step < NAN_AT:
            assert loss[step] == logged[step]["loss"]
            assert grad_norm[step] == logged[step]["grad_norm"]  # the norm before clipping, as the Trainer logs it
        else:
            assert math.isnan(loss[step]) and logged[step]["loss"] == 0.0
            assert math.isnan(grad_norm[step]) and math.isnan(logged[step]["grad_norm"])
    assert min(grad_norm[s] for s in range(1, NAN_AT)) > 0.1  # above max_grad_norm: not the clipped norm
    assert markers(samples) == [("run.started", 1.0, {}), ("run.crashed", 0.0, {}), ("run.finished", 1.0, {})]
    assert {(s["labels"]["run"], s["labels"]["host"], s["labels"]["pid"]) for s in samples} == {
        ("nan", socket.gethostname(), str(child.proc.pid))
    }


def test_crashes_are_recorded_with_the_exception_type(nan_crash: tuple[Child, int]) -> None:
    """Raised in training_step (the model) and caught by the caller: recorded at once; raised by a callback
    and never caught: recorded at exit. Either way run.crashed = 1 with exception=RuntimeError."""
    child, code = nan_crash
    assert code == 1
    assert "caught: raised by the model at step 2" in child.log
    assert "RuntimeError: raised by a callback at step 3" in child.log
    for phase, step in (("caught", 2), ("crash", 3)):
        samples = child.samples(phase)
        assert markers(samples) == [
            ("run.started", 1.0, {}),
            ("run.crashed", 1.0, {"exception": "RuntimeError"}),
            ("run.finished", 1.0, {}),
        ], phase
        assert [s["step"] for s in samples if s["metric"] == "run.crashed"] == [step]


def test_alertd_reads_the_samples_file(nan_crash: tuple[Child, int]) -> None:
    """alertd's own dry-run over the file fires loss_not_finite at the NaN step for train/loss."""
    child, _ = nan_crash
    transitions = dry_run(child.outdir / "nan" / "alertd-samples.jsonl")
    firing = {(t["rule"], t["labels"]["metric"]): t for t in transitions if t["state"] == "firing"}
    assert firing[("loss_not_finite", "train/loss")]["step"] == NAN_AT
    assert firing[("loss_not_finite", "train/loss")]["value"] == "NaN"
    assert firing[("grad_norm_not_finite", "train/grad_norm")]["step"] == NAN_AT
