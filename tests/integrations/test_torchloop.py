"""A real plain PyTorch loop with `AlertdLoop`: alertd's commands over the command channel (lr_scale on the optimizer
and its scheduler, skip_step, save, stop), the guard, and the commands the trainer must refuse (another user's file,
a link, an unknown action); a resumed run never applies a command twice."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from alertd.integrations import commands
from alertd.integrations.guard import Guard
from alertd.integrations.ledger import read
from alertd.integrations.torchloop import AlertdLoop
from alertd.rules.windows import Span, ZScore

Hook = Callable[[int, Path], None]


def train(
    out: Path, steps: int, hook: Hook | None = None, guard: Guard | None = None, nan_at: int | None = None
) -> dict[str, Any]:
    """Fit one linear layer (AdamW, lr 0.01, a LambdaLR of 1) for `steps` steps with AlertdLoop; `hook(step, dir)`
    runs before each step (to write commands). Returns the weights' sums after each step, the LRs, what stopped."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    weights: dict[int, float] = {}
    lrs: dict[int, float] = {}
    stopped_at = None
    with AlertdLoop(optimizer, scheduler, output_dir=out, model=model, guard=guard, signals=()) as run:
        for step in range(steps):
            if hook is not None:
                hook(step, out / "alertd-commands")
            x = torch.randn(8, 4)
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            if step == nan_at:
                loss = loss * math.nan
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):
                optimizer.step()
            else:
                optimizer.step()  # called anyway: a dropped update moves nothing
            scheduler.step()
            optimizer.zero_grad()
            weights[step] = float(sum(p.detach().double().sum() for p in model.parameters()))
            lrs[step] = optimizer.param_groups[0]["lr"]
            if run.boundary(step):
                stopped_at = step
                break
    return {"weights": weights, "lrs": lrs, "stopped_at": stopped_at, "base_lrs": scheduler.base_lrs}


def samples(out: Path) -> list[dict[str, Any]]:
    """The samples file's lines."""
    return [json.loads(x) for x in (out / "alertd-samples.jsonl").read_text().splitlines()]


def acks(out: Path) -> list[dict[str, Any]]:
    """The acknowledgements, in command order."""
    return [json.loads(p.read_text()) for p in sorted((out / "alertd-commands").glob("*.ack"))]


def at(step: int, action: str, **body: Any) -> Hook:
    """A hook that writes one command before `step`, as alertd's notifier does."""

    def hook(now: int, directory: Path) -> None:
        if now == step:
            commands.send(str(directory), "test", action, body)

    return hook


def test_lr_scale_skip_step_save_and_stop_in_a_plain_loop(tmp_path: Path) -> None:
    """lr_scale halves the optimizer's LR and the scheduler's base LR (the schedule keeps it); skip_step drops the
    next update only; save saves finite weights (ledger: by command); stop saves and stops; all acknowledged."""
    hooks = [at(3, "lr_scale", factor=0.5, min_lr=0.004), at(5, "skip_step"), at(7, "save"), at(9, "lr_scale")]
    hooks.append(at(10, "lr_scale", factor=0.5, min_lr=0.004))
    hooks.append(at(12, "stop"))

    def hook(step: int, directory: Path) -> None:
        for one in hooks:
            one(step, directory)

    result = train(tmp_path, 30, hook)
    lrs, weights = result["lrs"], result["weights"]
    # A command written before step N is taken at the boundary after it: it acts from update N + 1 on.
    assert lrs[3] == 0.01 and lrs[4] == 0.005 and lrs[9] == 0.005 and lrs[10] == 0.0025 and lrs[12] == 0.0025
    assert result["base_lrs"] == [0.0025]
    assert [s for s in range(1, 13) if weights[s] == weights[s - 1]] == [6]
    assert result["stopped_at"] == 12
    assert [(a["action"], a["step"], a["applied"]) for a in acks(tmp_path)] == [
        ("lr_scale", 4, True),
        ("skip_step", 6, True),
        ("save", 8, True),
        ("lr_scale", 10, True),
        ("lr_scale", 11, False),
        ("stop", 13, True),
    ]
    first, *_, floor, _ = acks(tmp_path)
    assert (first["old_lr"], first["new_lr"]) == (0.01, 0.005)
    assert "already at or below min_lr 0.004" in floor["refused"]
    ledger = [(e["step"], e["by"], e["saved"]) for e in read(tmp_path)]
    assert ledger == [(8, "command", True), (13, "stop", True)]
    assert (tmp_path / "alertd-save-step=8.pt").exists() and (tmp_path / "alertd-stop-step=13.pt").exists()
    lines = samples(tmp_path)
    assert {s["step"]: s["value"] for s in lines if s["metric"] == "train/lr"} == {4: 0.005, 10: 0.0025}
    actions = [(s["labels"]["action"], s["labels"]["outcome"]) for s in lines if s["metric"] == "alertd.action"]
    assert actions[-2:] == [("lr_scale", "refused"), ("stop", "applied")]
    (stopped,) = [s for s in lines if s["metric"] == "run.stopped"]
    assert stopped["labels"]["reason"] == "command" and stopped["labels"]["saved"] == "true"


def test_a_resumed_run_does_not_apply_a_done_command_again(tmp_path: Path) -> None:
    """The command is renamed .done once applied: a second run in the same directory leaves the LR alone."""
    train(tmp_path, 3, at(1, "lr_scale"))
    again = train(tmp_path, 3)
    assert set(again["lrs"].values()) == {0.01}
    assert len(acks(tmp_path)) == 1 and len(list((tmp_path / "alertd-commands").glob("*.cmd.done"))) == 1


def test_the_guard_skips_a_nan_step_on_its_own(tmp_path: Path) -> None:
    """Guard(sigma=6, window=10): the NaN-loss step is dropped (weights unchanged, finite at the end), logged as
    train/step_skipped; without a guard the same NaN poisons the weights."""
    guarded = train(tmp_path / "guarded", 20, guard=Guard(sigma=6, window=10), nan_at=12)
    weights = guarded["weights"]
    assert [s for s in range(1, 20) if weights[s] == weights[s - 1]] == [12]
    assert all(math.isfinite(w) for w in weights.values())
    (skipped,) = [s for s in samples(tmp_path / "guarded") if s["metric"] == "train/step_skipped"]
    assert skipped["step"] == 12 and skipped["labels"]["reason"] == "guard"
    assert "loss is nan" in skipped["labels"]["why"]
    plain = train(tmp_path / "plain", 20, nan_at=12)
    assert math.isnan(plain["weights"][19])


def test_guard_judges_as_the_cores_zscore() -> None:
    """The guard's outlier is exactly the rule condition {zscore: {over: 5 samples, threshold: 3, direction: up}}:
    the same values, the same verdicts (a time table: values in, skipped or not out)."""
    from alertd.buffer import Series
    from alertd.model import SeriesKey

    values = [1.0, 1.1, 0.9, 1.0, 1.05, 1.02, 5.0, 1.0, 0.2, 1.01, 1.03, math.inf, 1.0]
    guard = Guard(sigma=3, window=5)
    verdicts = [guard.judge(i, loss=v) is not None for i, v in enumerate(values)]
    rule, series = ZScore(Span(samples=5), 3, "up"), Series(SeriesKey("train/loss"))
    expected = []
    for i, v in enumerate(values):
        series.append(float(i), i, v)
        expected.append(rule.check(series, i) or not math.isfinite(v))
    assert verdicts == expected
    assert verdicts == [False] * 6 + [True, False, False, False, False, True, False]


def test_commands_the_trainer_refuses(tmp_path: Path) -> None:
    """Another user's command file, a symbolic link and an unknown action are refused (acknowledged with why,
    renamed .done, not applied); the trainer's own commands around them still apply, in order."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root (CI runs as root)")
    directory = tmp_path / "alertd-commands"

    def hook(step: int, d: Path) -> None:
        if step != 2:
            return
        commands.send(str(d), "test", "lr_scale", {"factor": 0.5})
        foreign = commands.send(str(d), "test", "lr_scale", {"factor": 0.001})
        os.chown(d / (foreign + ".cmd"), 65534, 65534)
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"action": "lr_scale", "factor": 0.001}))
        os.symlink(target, d / (commands.command_name("test", "lr_scale") + ".cmd"))
        commands.send(str(d), "test", "rewind", {})
        commands.send(str(d), "test", "lr_scale", {"factor": 0.5})

    result = train(tmp_path, 5, hook)
    got = acks(tmp_path)
    assert [a["applied"] for a in got] == [True, False, False, False, True]
    assert "owned by uid 65534" in got[1]["refused"]
    assert "can't open" in got[2]["refused"] or "not a regular file" in got[2]["refused"]
    assert "unknown action 'rewind'" in got[3]["refused"]
    assert result["lrs"][4] == 0.0025
    assert not list(directory.glob("*.cmd"))


def test_inbox_lists_the_directory_only_when_it_changed(tmp_path: Path) -> None:
    """One stat per look: an unchanged directory (its mtime older than RECENT_NS) is not listed again."""
    inbox = commands.Inbox(str(tmp_path))
    commands.send(str(tmp_path), "t", "skip_step", {})
    (first,) = inbox.poll()
    assert isinstance(first, commands.Command) and first.action == "skip_step"
    old = 1_000_000_000
    os.utime(tmp_path, ns=(old, old))
    inbox.poll()
    (tmp_path / "late.cmd").write_text("{}")
    os.utime(tmp_path, ns=(old, old))  # as if nothing changed
    assert inbox.poll() == []
    os.utime(tmp_path)
    assert len(inbox.poll()) == 2
