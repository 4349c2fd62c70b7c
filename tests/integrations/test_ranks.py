"""Ranks as labels: every rank of a torchrun run records its own samples, and alertd's run tracking takes the
ranks as members of one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from integ_helpers import HERE, read_samples

from alertd.integrations.commands import send
from alertd.integrations.ranks import rank_labels, rank_path
from alertd.integrations.samples_writer import SamplesWriter
from alertd.model import Sample, SeriesKey, make_labels
from alertd.runs.tracker import MAX_RANKS, RunState, RunTracker

TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_rank_labels_from_the_environment() -> None:
    assert rank_labels({}) == {}
    assert rank_labels({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1"}) == {
        "rank": "3",
        "local_rank": "1",
        "world_size": "4",
        "node": "1",
    }
    slurm = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NODEID": "2"}
    assert rank_labels(slurm) == {"rank": "5", "local_rank": "1", "world_size": "8", "node": "2"}
    assert rank_labels({"LOCAL_RANK": "0"}) == {}  # no rank known: no labels
    assert rank_path("/o/alertd-samples.rank{rank}.jsonl", "2") == "/o/alertd-samples.rank2.jsonl"
    assert rank_path("/o/alertd-samples.jsonl", "2") == "/o/alertd-samples.jsonl"


def test_every_rank_of_a_torchrun_loop_records_with_its_labels(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ALERTD_SAMPLES_FILE")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [str(TORCHRUN), "--nproc_per_node=2", "--standalone", str(HERE / "ranks_loop_run.py")]
    cmd[-1:] = [cmd[-1], str(tmp_path), "6"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    samples = read_samples(tmp_path / "alertd-samples.jsonl")
    by_rank: dict[str, list[dict[str, object]]] = {}
    for s in samples:
        labels = s["labels"]
        assert isinstance(labels, dict)
        assert labels["world_size"] == "2" and labels["run"] == "ddp"
        assert labels["local_rank"] == labels["rank"]
        by_rank.setdefault(labels["rank"], []).append(s)
    assert sorted(by_rank) == ["0", "1"]
    for rank, mine in by_rank.items():
        metrics = [m["metric"] for m in mine]
        assert metrics.count("train/loss") == 6, rank
        assert metrics.count("train/step_time") == 6, rank
        assert metrics[0] == "run.started" and metrics[-1] == "run.finished", rank
        assert len({m["labels"]["pid"] for m in mine}) == 1  # type: ignore[index]
    # rank 0 alone writes the ledger and saves the replicated model
    ledger = (tmp_path / "alertd-checkpoints.jsonl").read_text().splitlines()
    assert len(ledger) == 1 and (tmp_path / "alertd-step=6.pt").exists()
    # the tracker: one run, two ranks, both ended
    tracker = RunTracker()
    parsed = [
        Sample(
            SeriesKey(str(s["metric"]), make_labels({**s["labels"], "source": "raw"})), float(s["time"]), s["step"], 1.0
        )  # type: ignore[arg-type, dict-item]
        for s in samples
    ]
    tracker.observe(parsed)
    (run,) = tracker.all()
    assert run.state is RunState.ENDED
    ranks = run.as_json()["ranks"]
    assert isinstance(ranks, dict) and sorted(ranks) == ["0", "1"]
    assert all(r["state"] == "ended" and r["last_step"] == 5 for r in ranks.values())


def _s(metric: str, t: float, step: int | None, rank: str | None, value: float = 1.0, run: str = "j") -> Sample:
    labels = {"source": "raw", "run": run} | ({"rank": rank} if rank is not None else {})
    return Sample(SeriesKey(metric, make_labels(labels)), t, step, value)


def test_ranks_are_members_of_one_run_and_a_silent_rank_shows() -> None:
    tracker = RunTracker(stall_after=60.0)
    batch = [_s("run.started", 0.0, 0, r) for r in ("0", "1", "2")]
    for step in range(1, 4):
        batch += [_s("train/loss", step * 10.0, step, r) for r in ("0", "1", "2")]
    tracker.observe(batch, now=30.0)
    # rank 2 goes silent; 0 and 1 go on, in a batch big enough for the column-wise path
    later = [_s("train/loss", 30.0 + i, 3 + i, r) for i in range(1, 100) for r in ("0", "1")]
    tracker.observe(later, now=130.0)
    assert [(r.source, r.run) for r in tracker.all()] == [("raw", "j")]
    (run,) = tracker.all()
    ranks = run.as_json()["ranks"]
    assert isinstance(ranks, dict)
    assert ranks["0"] == {"last_step": 102, "last_time": 129.0, "state": "running", "pid": None}
    assert ranks["2"] == {"last_step": 3, "last_time": 30.0, "state": "stalled", "pid": None}
    assert run.state is RunState.RUNNING


def test_a_ranks_markers_and_late_samples_do_not_end_or_restart_the_run() -> None:
    tracker = RunTracker(stall_after=60.0)
    tracker.observe([_s("run.started", 0.0, 0, r) for r in ("0", "1")] + [_s("train/loss", 1.0, 1, r) for r in "01"])
    out = tracker.observe([_s("run.crashed", 2.0, 1, "1", 0.0), _s("run.finished", 2.0, 1, "1")])
    (run,) = tracker.all()
    assert out == [] and run.state is RunState.RUNNING
    assert run.as_json()["ranks"]["1"]["state"] == "ended"  # type: ignore[index]
    tracker.observe([_s("run.crashed", 3.0, 2, "0", 0.0), _s("run.finished", 3.0, 2, "0")])
    assert run.state is RunState.ENDED
    assert tracker.observe([_s("train/loss", 3.5, 2, "1")]) == []  # rank 1's last step, after rank 0's end
    assert run.state is RunState.ENDED


def test_ranks_per_run_are_bounded() -> None:
    tracker = RunTracker()
    tracker.observe([_s("train/loss", 1.0, 1, str(r)) for r in range(MAX_RANKS + 10)])
    (run,) = tracker.all()
    assert len(run.ranks) == MAX_RANKS and run.last_step == 1


def test_one_process_samples_carry_no_rank(tmp_path: Path) -> None:
    writer = SamplesWriter(tmp_path / "s.jsonl", {"run": "r"})
    writer.write("m", 1.0, 0)
    writer.close()
    assert read_samples(tmp_path / "s.jsonl")[0]["labels"] == {"run": "r"}


def test_a_job_whose_every_rank_is_silent_is_hung_and_one_process_only_stalled() -> None:
    """`run.hung` goes with `run.stalled` for a run of two ranks or more (1 when it stalls, 0 when it moves again
    or ends); a one-process run gets `run.stalled` alone."""
    tracker = RunTracker(stall_after=60.0)
    first = [_s("train/loss", 10.0, 1, r) for r in ("0", "1")] + [_s("train/loss", 10.0, 1, None, run="one")]
    tracker.observe(first, now=10.0)

    def derived(samples: list[Sample]) -> list[tuple[str, str, float, float]]:
        return [(s.series.metric, s.series.label("run") or "", s.time, s.value) for s in samples]

    assert derived(tracker.tick(now=71.0)) == [
        ("run.stalled", "j", 70.0, 1.0),
        ("run.hung", "j", 70.0, 1.0),
        ("run.stalled", "one", 70.0, 1.0),
    ]
    assert derived(tracker.observe([_s("train/loss", 80.0, 2, "1")], now=80.0)) == [
        ("run.stalled", "j", 80.0, 0.0),
        ("run.hung", "j", 80.0, 0.0),
    ]
    assert derived(tracker.observe([_s("run.finished", 90.0, 2, None, run="one")], now=90.0))[:1] == [
        ("run.stalled", "one", 90.0, 0.0)
    ]


def test_a_command_read_by_any_rank_is_carried_out_by_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """alertd's `lr_scale`, in the commands directory of rank 1 alone (a node of its own), halves the LR of all three
    ranks of a torchrun job at one step (a LR changed on one rank alone would make the replicas part for good);
    rank 1 acknowledges it, once."""
    commands = tmp_path / "node1-commands"
    commands.mkdir()
    name = send(str(commands), "halve", "lr_scale", {"action": "lr_scale", "factor": 0.5})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ALERTD_SAMPLES_FILE")}
    env["OMP_NUM_THREADS"] = "1"
    env["RANK1_COMMANDS"] = str(commands)
    cmd = [str(TORCHRUN), "--nproc_per_node=3", "--standalone", str(HERE / "ranks_loop_run.py"), str(tmp_path), "4"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lrs = {}
    for s in read_samples(tmp_path / "alertd-samples.jsonl"):
        labels = s["labels"]
        assert isinstance(labels, dict)
        if s["metric"] == "train/lr":
            assert labels["reason"] == "lr_scale" and labels["rank"] not in lrs
            lrs[labels["rank"]] = (s["step"], s["value"])
        if s["metric"] == "alertd.action":
            assert labels["outcome"] == "applied" and labels["command"] == name
    assert lrs == {"0": (1, 0.005), "1": (1, 0.005), "2": (1, 0.005)}
    assert sorted(p.name for p in commands.iterdir()) == [f"{name}.ack", f"{name}.cmd.done"]
    ack = json.loads((commands / f"{name}.ack").read_text())
    assert ack["applied"] is True and ack["old_lr"] == 0.01 and ack["new_lr"] == 0.005 and ack["step"] == 1
