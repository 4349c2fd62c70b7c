"""The tensorboard source woken by file-system notifications (`read_changed`): what it is told about is
read, whatever the directories' modification times say (a directory's mtime has the kernel clock's
coarse grain, so a logdir deleted and made again within a few milliseconds can carry the old one's)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace


def test_a_logdir_made_again_with_the_old_mtime_is_listed_when_the_logdir_is_reported(
    tmp_path: Path, kit: SimpleNamespace
) -> None:
    logdir = tmp_path / "runs"
    kit.write_events(logdir / "first", [kit.scalar_event(1, {"loss": 1})])
    src = kit.make_source(logdir)
    assert [s.step for s in src.read_new()] == [1]
    assert src.read_new() == []  # settled: the logdir is listed again only when its mtime changes
    old = logdir.stat().st_mtime_ns
    shutil.rmtree(logdir)
    kit.write_events(logdir / "second", [kit.scalar_event(2, {"loss": 2})])
    os.utime(logdir, ns=(old, old))  # made within the same clock tick as the old one's last change
    got = src.read_changed(frozenset({str(logdir), str(logdir / "first")}))
    assert kit.view(got) == [("loss", "second", 2, 2.0)]


def test_a_file_in_a_directory_never_reported_is_found_from_its_nearest_known_ancestor(
    tmp_path: Path, kit: SimpleNamespace
) -> None:
    logdir = tmp_path / "runs"
    kit.write_events(logdir / "a", [kit.scalar_event(1, {"loss": 1})])
    src = kit.make_source(logdir)
    assert len(src.read_new()) == 1
    path = kit.write_events(logdir / "b" / "deep", [kit.scalar_event(5, {"loss": 5})])
    # the directories' creation went unreported (made before their watch was in place): only the file's write is
    got = src.read_changed(frozenset({str(path)}))
    assert kit.view(got) == [("loss", "b/deep", 5, 5.0)]
    assert src.read_changed(frozenset({str(path)})) == []
