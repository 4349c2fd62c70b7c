"""A dry-run names a TensorBoard logdir's root run (`.` in the service) after the logdir: the source labels the
event files right in the logdir with `root_run` as it reads them, so no sample is made twice."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from alertd.dryrun import root_run_name


def test_the_root_run_takes_the_given_name_and_the_runs_below_keep_theirs(tmp_path: Path, kit: SimpleNamespace) -> None:
    logdir = tmp_path / "exp1"
    kit.write_events(logdir, [kit.scalar_event(s, {"loss": 1.0 + s, "lr": 0.5}) for s in range(3)])
    kit.write_events(logdir / "eval", [kit.scalar_event(5, {"loss": 9.0})])
    below = [("loss", "eval", 5, 9.0)]
    assert sorted(kit.view(kit.make_source(logdir).read_new())) == sorted(  # the service's names: `.` for the root
        [("loss", ".", s, 1.0 + s) for s in range(3)] + [("lr", ".", s, 0.5) for s in range(3)] + below
    )
    named = kit.make_source(logdir)
    named.root_run = root_run_name(str(logdir))
    samples = named.read_new()
    assert sorted(kit.view(samples)) == sorted(
        [("loss", "exp1", s, 1.0 + s) for s in range(3)] + [("lr", "exp1", s, 0.5) for s in range(3)] + below
    )
    # each series is one key object for all its samples (the replay groups its samples by key object)
    assert len({id(s.series) for s in samples}) == 3


def test_the_name_is_the_logdirs_directory_name(tmp_path: Path) -> None:
    assert root_run_name(str(tmp_path / "exp1")) == "exp1"
    assert root_run_name(str(tmp_path / "exp1") + "/") == "exp1"
    assert root_run_name(str(tmp_path / "exp1" / ".")) == "exp1"
    assert root_run_name("/") == "."  # no name to give: the service's
