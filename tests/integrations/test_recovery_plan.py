"""The recovery plan on the trainer side (`alertd.integrations.plan`): its validation, which plan applies, and real,
tiny trainings (HF Trainer, Lightning, AlertdLoop) resumed under a hand-written plan: the LR is cut as the
trainer's own state shows, the planned updates move no weight and are recorded as train/step_skipped with
reason=plan, the plan is acknowledged; a plan whose checkpoint was not resumed is refused and skips nothing."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from alertd.integrations import plan as planmod
from alertd.integrations.ledger import read
from alertd.integrations.plan import (
    ACK_NAME,
    PLAN_ENV,
    PLAN_NAME,
    RUN_INFO_ENV,
    RecoveryPlan,
    acknowledge,
    current_plan,
    read_ack,
    skips,
    write_plan,
    write_run_info,
)
from alertd.integrations.resume import resume_from

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))

ENV = (
    PLAN_ENV,
    RUN_INFO_ENV,
    "ALERTD_ATTEMPT",
    "ALERTD_RESUME_FROM",
    "ALERTD_CHECKPOINTS",
    "ALERTD_SAMPLES_FILE",
    "ALERTD_STOP_FILE",
    "ALERTD_COMMANDS_DIR",
    "ALERTD_RUN",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No alertd variable of the environment the tests run in leaks into them."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def make_plan(checkpoint: str, step: int, skip: tuple[int, int] | None, factor: float = 0.5, attempt: int = 2) -> Any:
    """A plan as alertd's recover action writes it."""
    incident = {"rule": "loss_not_finite", "step": step + 3, "time": 1.0, "attempt": attempt - 1, "value": "NaN"}
    return RecoveryPlan(1, "test", attempt, checkpoint, step, skip, factor, incident, 2.0)


def use_plan(monkeypatch: pytest.MonkeyPatch, directory: Path, plan: RecoveryPlan) -> None:
    """Write the plan into the ledger directory and set the child's environment as `alertd exec` does."""
    monkeypatch.setenv(PLAN_ENV, write_plan(directory, plan))
    monkeypatch.setenv("ALERTD_ATTEMPT", str(plan.attempt))
    monkeypatch.setenv("ALERTD_RESUME_FROM", plan.checkpoint)


def samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "alertd-samples.jsonl").read_text().splitlines()]


def rows(out: Path, metric: str) -> list[dict[str, Any]]:
    return [s for s in samples(out) if s["metric"] == metric]


def ack(out: Path) -> dict[str, Any]:
    body = read_ack(out)
    assert body is not None
    return body


def weight_sum(model: Any) -> float:
    return float(sum(float(p.detach().double().sum()) for p in model.parameters()))


# Units: the plan's validation, which plan applies.


def test_a_plan_round_trips_and_a_malformed_one_is_refused_with_why(tmp_path: Path) -> None:
    plan = make_plan("/out/checkpoint-30", 30, (31, 41))
    assert RecoveryPlan.from_json(plan.to_json()) == plan
    assert plan.to_json()["skip"] == [31, 41]
    assert RecoveryPlan.from_json({**plan.to_json(), "skip": []}).skip is None
    bad = {
        "version": (2, "unsupported plan version 2"),
        "attempt": (0, "'attempt' must be an integer >= 1"),
        "checkpoint": ("", "'checkpoint' must be a non-empty path"),
        "checkpoint_step": ("30", "'checkpoint_step' must be an integer"),
        "skip": ([41, 31], "'skip' must be [] or [first, last]"),
        "lr_factor": (-0.5, "'lr_factor' must be a positive number"),
        "incident": ([], "'incident' must be a JSON object"),
    }
    for key, (value, why) in bad.items():
        with pytest.raises(ValueError, match=why.replace("[", r"\[").replace("]", r"\]")):
            RecoveryPlan.from_json({**plan.to_json(), key: value})
    with pytest.raises(ValueError, match="'lr_factor' must be a finite number"):
        RecoveryPlan.from_json({**plan.to_json(), "lr_factor": True})
    assert skips(plan, 31) and skips(plan, 41) and not skips(plan, 30) and not skips(plan, 42)
    assert not skips(make_plan("/x", 1, None), 2) and not skips(None, 2)


def test_a_malformed_plan_file_is_logged_and_nothing_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / PLAN_NAME).write_text(json.dumps({**make_plan("/x", 3, None).to_json(), "lr_factor": 0}))
    with caplog.at_level(logging.WARNING, "alertd.integrations"):
        assert current_plan(tmp_path) is None
    assert str(tmp_path / PLAN_NAME) in caplog.text and "'lr_factor' must be a positive number" in caplog.text
    (tmp_path / PLAN_NAME).write_text("{not json")
    monkeypatch.setenv(PLAN_ENV, str(tmp_path / PLAN_NAME))
    caplog.clear()
    with caplog.at_level(logging.WARNING, "alertd.integrations"):
        assert current_plan(None) is None
    assert "is not JSON" in caplog.text


def test_which_plan_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's plan for this attempt; else the ledger directory's, until its attempt is acknowledged."""
    ledger_dir, elsewhere = tmp_path / "out", tmp_path / "plans"
    ledger_dir.mkdir()
    elsewhere.mkdir()
    assert current_plan(ledger_dir) is None
    local = make_plan("/ckpt-a", 5, (6, 7), attempt=2)
    write_plan(ledger_dir, local)
    assert current_plan(ledger_dir) == local  # a requeued job: no environment
    assert current_plan(None) is None
    acknowledge(ledger_dir, local, False, refused="test")
    assert current_plan(ledger_dir) is None  # applied (or refused) once
    assert ack(ledger_dir)["attempt"] == 2 and ack(ledger_dir)["applied"] is False
    write_plan(ledger_dir, make_plan("/ckpt-b", 9, None, attempt=3))
    assert current_plan(ledger_dir).attempt == 3  # type: ignore[union-attr]

    env = make_plan("/ckpt-c", 12, (13, 13), attempt=4)
    monkeypatch.setenv(PLAN_ENV, write_plan(elsewhere, env))
    assert current_plan(ledger_dir) == env  # the environment's wins, its attempt unset: applies
    monkeypatch.setenv("ALERTD_ATTEMPT", "4")
    assert current_plan(ledger_dir) == env
    acknowledge(ledger_dir, current_plan(ledger_dir), True)  # type: ignore[arg-type]
    assert (elsewhere / ACK_NAME).exists() and ack(ledger_dir)["attempt"] == 4  # next to the plan too
    monkeypatch.setenv("ALERTD_ATTEMPT", "5")
    assert current_plan(ledger_dir) is None  # not this attempt's plan
    monkeypatch.setenv(PLAN_ENV, str(elsewhere / "missing.json"))
    monkeypatch.setenv("ALERTD_ATTEMPT", "4")
    assert current_plan(ledger_dir) is None


def test_resume_from_prefers_a_good_plan_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ckpt-5", "ckpt-10"):
        (tmp_path / name).mkdir()
    entries = [
        {"step": 5, "path": str(tmp_path / "ckpt-5"), "finite": True, "saved": True},
        {"step": 10, "path": str(tmp_path / "ckpt-10"), "finite": True, "saved": True},
        {"step": 15, "path": str(tmp_path / "ckpt-15"), "finite": False, "saved": False},
    ]
    (tmp_path / "alertd-checkpoints.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    monkeypatch.setenv("ALERTD_RESUME_FROM", str(tmp_path / "ckpt-10"))
    assert resume_from() == str(tmp_path / "ckpt-10")
    monkeypatch.setenv(PLAN_ENV, write_plan(tmp_path, make_plan(str(tmp_path / "ckpt-5"), 5, None)))
    monkeypatch.setenv("ALERTD_ATTEMPT", "2")
    assert resume_from() == str(tmp_path / "ckpt-5")
    write_plan(tmp_path, make_plan(str(tmp_path / "ckpt-15"), 15, None))  # not good: ALERTD_RESUME_FROM's
    assert resume_from() == str(tmp_path / "ckpt-10")
    monkeypatch.delenv(PLAN_ENV)
    monkeypatch.delenv("ALERTD_RESUME_FROM")
    write_plan(tmp_path, make_plan(str(tmp_path / "ckpt-5"), 5, None))
    assert resume_from() is None and resume_from(tmp_path) == str(tmp_path / "ckpt-5")


def test_run_info_is_written_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_run_info(tmp_path, "hf")
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv(RUN_INFO_ENV, str(tmp_path / "info.json"))
    write_run_info(tmp_path / "out", "hf")
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["ledger"] == str(tmp_path / "out") and info["framework"] == "hf" and info["pid"] == os.getpid()
    monkeypatch.setenv(RUN_INFO_ENV, str(tmp_path / "missing" / "info.json"))
    with caplog.at_level(logging.WARNING, "alertd.integrations"):
        write_run_info(tmp_path, "hf")  # logged, not raised
    assert "can't write the run's info" in caplog.text
    assert planmod.MAX_PLAN_BYTES == 65536


# AlertdLoop.


def loop_train(out: Path, total: int, **kwargs: Any) -> dict[str, Any]:
    """Fit one linear layer (AdamW, lr 0.01, a constant LambdaLR) with AlertdLoop, the data a function of the step;
    the weights' sum after each step and at the start, the LR, the loop's start step."""
    from alertd.integrations.torchloop import AlertdLoop

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    weights: dict[int, float] = {}
    with AlertdLoop(optimizer, scheduler, output_dir=out, model=model, signals=(), **kwargs) as run:
        weights[run.start_step] = weight_sum(model)
        for step in range(run.start_step, total):
            x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            weights[step + 1] = weight_sum(model)  # updates done
            run.boundary(step)
    return {"weights": weights, "lr": optimizer.param_groups[0]["lr"], "start": run.start_step}


def test_loop_saves_on_schedule_and_resumes_under_a_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "loop"
    first = loop_train(out, 12, save_every=5, keep=1)
    assert sorted(p.name for p in out.glob("alertd-step=*.pt")) == ["alertd-step=10.pt"]  # step 5's rotated away
    assert [(e["step"], e["by"], e["saved"]) for e in read(out)] == [(5, "schedule", True), (10, "schedule", True)]
    checkpoint = str(out / "alertd-step=10.pt")
    use_plan(monkeypatch, out, make_plan(checkpoint, 10, (11, 13)))
    monkeypatch.setenv(RUN_INFO_ENV, str(tmp_path / "info.json"))
    again = loop_train(out, 16)
    assert again["start"] == 10 and again["weights"][10] == first["weights"][10]
    w = again["weights"]
    assert w[11] == w[12] == w[13] == w[10] and w[14] != w[13]  # updates 11-13 dropped, 14 taken
    assert again["lr"] == 0.005
    skipped = rows(out, "train/step_skipped")
    assert [(s["step"], s["labels"]["reason"], s["labels"]["why"]) for s in skipped] == [
        (step, "plan", "recovery attempt 2") for step in (10, 11, 12)
    ]
    losses = [s["step"] for s in rows(out, "train/loss")]
    assert 10 not in losses[12:] and losses[12:] == [13, 14, 15]  # after the first run's 12
    (recovery,) = rows(out, "alertd.recovery")
    assert recovery["value"] == 2 and recovery["labels"]["checkpoint"] == "alertd-step=10.pt"
    assert [(s["step"], s["value"]) for s in rows(out, "train/lr") if s["labels"]["reason"] == "recover"] == [
        (10, 0.005)
    ]
    body = ack(out)
    assert {k: v for k, v in body.items() if k != "time"} == {
        "attempt": 2,
        "applied": True,
        "resumed_step": 10,
        "checkpoint": checkpoint,
        "old_lr": 0.01,
        "new_lr": 0.005,
        "lr_factor": 0.5,
        "skip": [11, 13],
    }
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["ledger"] == str(out) and info["framework"] == "torch"


def test_loop_refuses_a_plan_whose_checkpoint_was_not_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "loop"
    loop_train(out, 5, save_every=5)
    use_plan(monkeypatch, out, make_plan(str(out / "alertd-step=5.pt"), 5, (6, 7)))
    again = loop_train(out, 8, save=lambda path: None)  # its own save: the loop resumes nothing, starts at 0
    assert again["start"] == 0 and again["lr"] == 0.01
    assert rows(out, "train/step_skipped") == [] and rows(out, "alertd.recovery") == []
    body = ack(out)
    assert body["applied"] is False and body["attempt"] == 2
    assert body["refused"].startswith("training started at step 0, not at the plan's checkpoint step 5")


# Hugging Face Trainer.


def hf_train(out: Path, steps: int, resume: str | None, weights: dict[int, float], **overrides: Any) -> Any:
    """The one-layer GPT-2 of tests/writers/hf_trainer_run.py, a constant LR of 1e-3, AlertdCallback; the weights'
    sum at the start and after each step."""
    from hf_trainer_run import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, RandomTokens
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from alertd.integrations.transformers import AlertdCallback

    class Weights(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            weights[state.global_step] = weight_sum(model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            weights[state.global_step] = weight_sum(model)

    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB_SIZE, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    settings: dict[str, Any] = {
        "output_dir": str(out),
        "max_steps": steps,
        "per_device_train_batch_size": BATCH_SIZE,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": False,
        "seed": 0,
    }
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=TrainingArguments(**{**settings, **overrides}),
        train_dataset=RandomTokens(steps * BATCH_SIZE, SEQ_LEN, VOCAB_SIZE),
        callbacks=[Weights(), AlertdCallback(signals=())],
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_hf_resumes_under_a_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan is applied at on_train_begin, after the Trainer loaded the optimizer and scheduler (its own log shows
    the halved LR); updates 6-7 are dropped without a forward pass (the weights stay those of checkpoint-5)."""
    out = tmp_path / "hf"
    first: dict[int, float] = {}
    hf_train(out, 8, None, first, save_strategy="steps", save_steps=5)
    checkpoint = str(out / "checkpoint-5")
    assert (read(out)[0]["step"], read(out)[0]["path"]) == (5, checkpoint)
    use_plan(monkeypatch, out, make_plan(checkpoint, 5, (6, 7)))
    monkeypatch.setenv(RUN_INFO_ENV, str(tmp_path / "info.json"))
    weights: dict[int, float] = {}
    trainer = hf_train(out, 9, resume_from(), weights)
    assert weights[5] == first[5] and weights[6] == weights[7] == first[5] and weights[8] != weights[7]
    assert trainer.state.global_step == 9
    lrs = {e["step"]: e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e}
    assert lrs[5] == 1e-3 and {lrs[s] for s in (6, 7, 8, 9)} == {5e-4}
    skipped = rows(out, "train/step_skipped")
    assert [(s["step"], s["labels"]["reason"], s["labels"]["why"]) for s in skipped] == [
        (6, "plan", "recovery attempt 2"),
        (7, "plan", "recovery attempt 2"),
    ]
    resumed = samples(out)[[s["metric"] for s in samples(out)].index("alertd.recovery") :]
    assert [s["step"] for s in resumed if s["metric"] == "train/loss"] == [8, 9]
    assert [s["step"] for s in resumed if s["metric"] == "train/grad_norm"] == [8, 9]
    body = ack(out)
    assert {k: body[k] for k in ("attempt", "applied", "resumed_step", "checkpoint", "skip", "lr_factor")} == {
        "attempt": 2,
        "applied": True,
        "resumed_step": 5,
        "checkpoint": checkpoint,
        "skip": [6, 7],
        "lr_factor": 0.5,
    }
    assert body["old_lr"] == 1e-3 and body["new_lr"] == 5e-4
    assert json.loads((tmp_path / "info.json").read_text())["framework"] == "hf"


def test_hf_refuses_a_plan_when_training_did_not_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "hf"
    (out / "checkpoint-5").mkdir(parents=True)
    use_plan(monkeypatch, out, make_plan(str(out / "checkpoint-5"), 5, (1, 2)))
    weights: dict[int, float] = {}
    trainer = hf_train(out, 3, None, weights)  # resume_from_checkpoint not passed
    assert weights[0] != weights[1] != weights[2]
    assert {e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e} == {1e-3}
    assert rows(out, "train/step_skipped") == []
    body = ack(out)
    assert (
        body["applied"] is False
        and "training started at step 0, not at the plan's checkpoint step 5" in (body["refused"])
    )


# Lightning.


def lightning_fit(out: Path, steps: int, resume: str | None, record: dict[str, dict[int, float]]) -> Any:
    """One linear layer (SGD, lr 0.1, a StepLR that never steps down) with AlertdCallback and a ModelCheckpoint
    every 5 steps; the weights' sum and the LR after each update."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning_run import TinyRegression, random_loader

    from alertd.integrations.lightning import AlertdCallback

    class Recorded(TinyRegression):  # type: ignore[misc]
        def on_train_start(self) -> None:
            record["weights"][self.global_step] = weight_sum(self)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            record["weights"][self.global_step] = weight_sum(self)
            record["lrs"][self.global_step] = self.trainer.optimizers[0].param_groups[0]["lr"]

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1000)}

    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        default_root_dir=out,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            AlertdCallback(signals=()),
            ModelCheckpoint(dirpath=out / "ckpts", every_n_train_steps=5, save_top_k=-1),
        ],
    )
    trainer.fit(Recorded(), train_dataloaders=random_loader(20, seed=1), ckpt_path=resume)
    return trainer


NO_VAL = "ignore:You defined a `validation_step` but have no `val_dataloader`"


@pytest.mark.filterwarnings(
    "ignore:`training_step` returned `None`",
    "ignore:Checkpoint directory .* exists and is not empty",
    "ignore:You're resuming from a checkpoint that ended before the epoch ended",
    NO_VAL,
)
def test_lightning_resumes_under_a_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Applied at on_train_start (after Lightning restored the optimizer and scheduler): the LR is halved; the
    planned updates' training_step returns None, so they move nothing, and global_step still advances past them."""
    out = tmp_path / "pl"
    first: dict[str, dict[int, float]] = {"weights": {}, "lrs": {}}
    lightning_fit(out, 8, None, first)
    ((step, checkpoint),) = [(e["step"], e["path"]) for e in read(out)]
    assert step == 5
    use_plan(monkeypatch, out, make_plan(checkpoint, 5, (6, 8)))
    record: dict[str, dict[int, float]] = {"weights": {}, "lrs": {}}
    trainer = lightning_fit(out, 11, resume_from(), record)
    assert trainer.global_step == 11
    w = record["weights"]
    assert w[5] == first["weights"][5] and w[6] == w[7] == w[8] == w[5] and w[9] != w[8]
    assert set(record["lrs"].values()) == {0.05}
    assert trainer.lr_scheduler_configs[0].scheduler.base_lrs == [0.05]
    skipped = rows(out, "train/step_skipped")
    assert [(s["step"], s["labels"]["reason"]) for s in skipped] == [(5, "plan"), (6, "plan"), (7, "plan")]
    resumed = samples(out)[[s["metric"] for s in samples(out)].index("alertd.recovery") :]
    assert [s["step"] for s in resumed if s["metric"] == "train/loss"] == [8, 9, 10]
    body = ack(out)
    assert (body["applied"], body["resumed_step"], body["skip"], body["old_lr"], body["new_lr"]) == (
        True,
        5,
        [6, 8],
        0.1,
        0.05,
    )
    assert "training_step" not in vars(trainer.lightning_module)  # put back at teardown


@pytest.mark.filterwarnings(NO_VAL)
def test_lightning_refuses_a_plan_when_training_did_not_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "pl"
    out.mkdir()
    use_plan(monkeypatch, out, make_plan(str(out / "missing.ckpt"), 5, (1, 3)))
    record: dict[str, dict[int, float]] = {"weights": {}, "lrs": {}}
    lightning_fit(out, 4, resume_from(), record)  # resume_from(): None, the checkpoint is not in a ledger
    assert len(set(record["weights"].values())) == 5 and set(record["lrs"].values()) == {0.1}
    assert rows(out, "train/step_skipped") == []
    body = ack(out)
    assert body["applied"] is False and body["refused"].startswith("training started at step 0")
