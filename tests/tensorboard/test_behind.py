"""`TensorBoardSource.behind` (the service polls again at once while it is true) over real event files: true while
a file has bytes past the per-poll budget, false once they are read or the file is gone, whatever the many other
files do."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import alertd.sources.tensorboard.source as tb_source

STEPS = 400


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-poll budget of 4 KiB read 1 KiB at a time (256 MiB and 64 MiB in the service), so that a few hundred
    events make a backlog."""
    monkeypatch.setattr(tb_source, "_MAX_POLL_READ", 4096)
    monkeypatch.setattr(tb_source, "_MAX_READ", 1024)


@pytest.mark.usefixtures("small_budget")
def test_a_backlog_among_many_runs_is_read_on_until_none_is_left(tmp_path: Path, kit: SimpleNamespace) -> None:
    for i in range(60):
        kit.write_events(tmp_path / f"quiet{i:02d}", [kit.scalar_event(0, {"loss": 1.0})])
    for name in ("big_a", "big_b"):
        kit.write_events(tmp_path / name, [kit.scalar_event(s, {"loss": s / 10}) for s in range(STEPS)])
    src = kit.make_source(tmp_path)
    got = src.read_new()
    assert src.behind
    polls = 1
    while src.behind:
        got += src.read_new()
        polls += 1
        assert polls < 1000, "the backlog never ends"
    assert polls > 2
    for name in ("big_a", "big_b"):  # every step of both backlogs, once, in order
        assert [s.step for s in got if s.series.label("run") == name] == list(range(STEPS))
    assert sum(str(s.series.label("run")).startswith("quiet") for s in got) == 60
    assert src.read_new() == [] and not src.behind


@pytest.mark.usefixtures("small_budget")
def test_a_file_gone_in_the_middle_of_its_backlog_is_not_waited_for(tmp_path: Path, kit: SimpleNamespace) -> None:
    kit.write_events(tmp_path / "quiet", [kit.scalar_event(0, {"loss": 1.0})])
    big = kit.write_events(tmp_path / "big", [kit.scalar_event(s, {"loss": s / 10}) for s in range(STEPS)])
    src = kit.make_source(tmp_path)
    src.read_new()
    assert src.behind
    big.unlink()
    src.read_new()  # the file is found gone, and dropped
    assert not src.behind
    assert src.read_new() == [] and not src.behind
