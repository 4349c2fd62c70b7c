"""The checkpoint ledger (framework-free) and the finiteness check of the weights (torch, no framework)."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alertd.integrations.ledger import LEDGER_NAME, Ledger, last_good, read


def test_the_ledger_records_saves_and_vetoes_and_knows_the_last_good_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One JSON line per save or veto; last_good is the newest finite save whose path still exists."""
    out = tmp_path / "out"  # created by the first record
    ledger = Ledger(out, "hf", write=True)
    assert last_good(out) is None and ledger.last_good() is None and read(out) == []
    for step in (10, 20, 30):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        ledger.saved(step, str(out / f"checkpoint-{step}"), "schedule")
    with caplog.at_level(logging.INFO, logger="alertd.integrations"):
        assert ledger.vetoed(40, str(out / "checkpoint-40"), "schedule")
        assert not ledger.vetoed(40, str(out / "checkpoint-40"), "schedule")  # twice at one step: once
        assert ledger.vetoed(41, str(out / "checkpoint-41"), "stop")
        assert ledger.vetoed(50, str(out / "checkpoint-50"), "schedule")
    lines = (out / LEDGER_NAME).read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    assert set(first) == {"step", "path", "time", "finite", "saved", "by", "framework"}
    assert (first["step"], first["path"], first["finite"], first["saved"], first["by"], first["framework"]) == (
        10,
        str(out / "checkpoint-10"),
        True,
        True,
        "schedule",
        "hf",
    )
    assert [(e["step"], e["finite"], e["saved"], e["by"]) for e in read(out)] == [
        (10, True, True, "schedule"),
        (20, True, True, "schedule"),
        (30, True, True, "schedule"),
        (40, False, False, "schedule"),
        (41, False, False, "stop"),
        (50, False, False, "schedule"),
    ]
    good = str(out / "checkpoint-30")
    assert last_good(out) == read(out)[2] and ledger.last_good() == good
    # The first vetoed scheduled save is a WARNING naming the last good checkpoint; the later ones are INFO.
    vetoes = [(r.levelno, r.getMessage()) for r in caplog.records if "not saved" in r.getMessage()]
    said = "alertd: step {}: weights not finite, checkpoint-{} not saved; the last good checkpoint is {}"
    assert vetoes == [(logging.WARNING, said.format(40, 40, good)), (logging.INFO, said.format(50, 50, good))]
    # Rotation deletes the old ones: the newest that still exists is the last good one; none left, none.
    (out / "checkpoint-30").rmdir()
    assert last_good(out)["path"] == str(out / "checkpoint-20")  # type: ignore[index]
    assert ledger.last_good() == str(out / "checkpoint-20")  # from the file, now that this run's is gone
    (out / "checkpoint-20").rmdir()
    (out / "checkpoint-10").rmdir()
    assert last_good(out) is None and ledger.last_good() is None


def test_only_the_writing_process_writes(tmp_path: Path) -> None:
    """Other ranks keep the same view (their last good checkpoint) and write nothing."""
    (tmp_path / "checkpoint-10").mkdir()
    ledger = Ledger(tmp_path, "lightning", write=False)
    ledger.saved(10, str(tmp_path / "checkpoint-10"), "schedule")
    ledger.vetoed(20, str(tmp_path / "checkpoint-20"), "schedule")
    assert not (tmp_path / LEDGER_NAME).exists()
    assert ledger.last_good() == str(tmp_path / "checkpoint-10")


def test_reads_are_bounded_and_skip_what_is_not_an_entry(tmp_path: Path) -> None:
    """Only the last max_bytes are read (the cut line dropped); bad lines and a line being written are skipped."""
    good = tmp_path / "ckpt"
    good.mkdir()
    entry = {"step": 1, "path": str(good), "time": 1.0, "finite": True, "saved": True, "by": "schedule"}
    filler = {"step": 2, "path": str(tmp_path / "gone"), "time": 2.0, "finite": True, "saved": True, "by": "schedule"}
    with open(tmp_path / LEDGER_NAME, "w") as f:
        f.write(json.dumps(entry) + "\n")
        f.write("not json\n[1, 2]\n")
        for _ in range(2000):
            f.write(json.dumps(filler) + "\n")
        f.write('{"step": 3, "path": "')  # a line still being written
    assert last_good(tmp_path)["step"] == 1  # type: ignore[index]
    size = (tmp_path / LEDGER_NAME).stat().st_size
    tail = read(tmp_path, max_bytes=1000)
    assert 0 < len(tail) < 20 and all(e["step"] == 2 for e in tail)
    assert last_good(tmp_path, max_bytes=1000) is None  # the good one lies beyond the bytes read
    assert len(read(tmp_path, max_bytes=size)) == 2001


def test_finite_looks_at_parameters_and_optimizer_state() -> None:
    """NaN or Inf in a parameter or anywhere in the optimizer's state makes the weights not finite; buffers don't."""
    import torch

    from alertd.integrations.finite import local_flag, tensors_of

    def finite(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
        return int(local_flag(tensors_of([model], [optimizer]), "cpu").item())

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    model[1].register_buffer("mask", torch.full((4,), -math.inf))  # buffers are not weights
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    assert finite(model, optimizer) == 1
    state = optimizer.state[model[0].bias]
    state["exp_avg_sq"][0] = math.inf  # the optimizer's state alone
    assert finite(model, optimizer) == 0
    state["exp_avg_sq"][0] = 0.0
    assert finite(model, optimizer) == 1
    with torch.no_grad():
        model[0].weight[1, 2] = math.nan  # a weight
    assert finite(model, optimizer) == 0
    with torch.no_grad():
        model[0].weight[1, 2] = 0.0
    optimizer.state[model[0].weight]["extra"] = {"nested": [math.nan]}  # a number, deeper down
    assert finite(model, optimizer) == 0
    # An optimizer that keeps its own (master) copies of the parameters: those are looked at too.
    master = [p.detach().clone().requires_grad_() for p in model[0].parameters()]
    with torch.no_grad():
        master[0][0, 0] = math.nan
    assert finite(torch.nn.Linear(2, 2), torch.optim.SGD(master, lr=0.1)) == 0


RANKS = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from alertd.integrations.finite import all_ranks_min

    rank, rendezvous = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    flag = torch.tensor(1 if rank == 0 else 0, dtype=torch.int32)  # only rank 1 has NaN weights
    print(int(all_ranks_min(flag).item()))
    dist.destroy_process_group()
    """
)


def test_all_ranks_agree_when_one_has_nan_weights(tmp_path: Path) -> None:
    """Two processes (gloo): the flag is all-reduced with MIN, so both veto (a rank that saved alone would hang)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANKS, str(rank), str(tmp_path / "rendezvous")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["0", "0"]
