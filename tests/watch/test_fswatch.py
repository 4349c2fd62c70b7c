"""The inotify watcher with the real kernel: what it reports, for which source, and how it follows
directories that appear, move, vanish and come back."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from alertd.sources.watch import FsWatcher, WatchDir, fs_type, notifications_arrive

Reports = list[tuple[str, frozenset[str] | None]]


def scenario(body: Callable[[FsWatcher, Reports], Awaitable[None]]) -> None:
    async def main() -> None:
        reports: Reports = []
        watcher = FsWatcher(lambda owner, paths: reports.append((owner, paths)))
        task = asyncio.get_running_loop().create_task(watcher.run())
        try:
            await body(watcher, reports)
        finally:
            task.cancel()
            watcher.close()

    asyncio.run(main())


async def settle(reports: Reports) -> set[str]:
    """The paths reported once the events of what was just done have been read (then forgotten)."""
    await asyncio.sleep(0.05)
    paths = {p for _, ps in reports if ps is not None for p in ps}
    reports.clear()
    return paths


def test_writes_and_new_directories_in_a_tree_are_reported_with_their_paths(tmp_path: Path) -> None:
    async def body(w: FsWatcher, reports: Reports) -> None:
        w.add("tb", [WatchDir(str(tmp_path), tree=True)])
        (tmp_path / "f").write_text("x")
        assert str(tmp_path / "f") in await settle(reports)
        os.makedirs(tmp_path / "a" / "b")
        (tmp_path / "a" / "b" / "g").write_text("y")  # at once: the directory may not be watched yet
        seen = await settle(reports)
        assert str(tmp_path / "a") in seen  # the source lists it, finding what was written before the watch
        (tmp_path / "a" / "b" / "g").write_text("z")
        assert await settle(reports) == {str(tmp_path / "a" / "b" / "g")}
        assert {owner for owner, _ in reports} <= {"tb"}

    scenario(body)


def test_a_single_directory_is_watched_without_the_ones_below(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()

    async def body(w: FsWatcher, reports: Reports) -> None:
        w.add("samples", [WatchDir(str(tmp_path), tree=False)])
        (tmp_path / "sub" / "x").write_text("x")
        assert await settle(reports) == set()
        (tmp_path / "s.jsonl").write_text("{}")
        assert await settle(reports) == {str(tmp_path / "s.jsonl")}

    scenario(body)


def test_a_root_is_waited_for_and_followed_when_deleted_and_made_again(tmp_path: Path) -> None:
    root = tmp_path / "later" / "runs"

    async def body(w: FsWatcher, reports: Reports) -> None:
        w.add("tb", [WatchDir(str(root), tree=True)])
        os.makedirs(root)
        assert str(root) in await settle(reports)
        (root / "f").write_text("x")
        assert str(root / "f") in await settle(reports)
        shutil.rmtree(tmp_path / "later")
        assert str(root) in await settle(reports)
        os.makedirs(root / "again")
        assert str(root) in await settle(reports)
        (root / "again" / "f").write_text("x")
        assert str(root / "again" / "f") in await settle(reports)
        assert w.watched == 2  # the root and its directory: the ancestors waited on are let go

    scenario(body)


def test_a_directory_moved_inside_the_tree_is_followed_under_its_new_name(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()

    async def body(w: FsWatcher, reports: Reports) -> None:
        w.add("tb", [WatchDir(str(tmp_path), tree=True)])
        os.rename(tmp_path / "old", tmp_path / "new")
        assert {str(tmp_path / "old"), str(tmp_path / "new")} <= await settle(reports)
        (tmp_path / "new" / "f").write_text("x")
        assert await settle(reports) == {str(tmp_path / "new" / "f")}

    scenario(body)


def test_two_sources_share_a_directory_and_removing_one_keeps_the_other(tmp_path: Path) -> None:
    async def body(w: FsWatcher, reports: Reports) -> None:
        w.add("a", [WatchDir(str(tmp_path), tree=True)])
        w.add("b", [WatchDir(str(tmp_path), tree=False)])
        (tmp_path / "f").write_text("x")
        await asyncio.sleep(0.05)
        assert {owner for owner, _ in reports} == {"a", "b"}
        reports.clear()
        w.remove("a")
        (tmp_path / "f").write_text("y")
        await asyncio.sleep(0.05)
        assert [owner for owner, _ in reports] == ["b"]
        w.remove("b")
        assert w.watched == 0

    scenario(body)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /mnt/nfs rw,relatime shared:9 - nfs4 server:/export rw
31 22 0:41 / /mnt/my\\040disk rw shared:10 - fuse.sshfs host:/ rw
32 30 0:42 / /mnt/nfs/local rw shared:11 - tmpfs tmpfs rw
"""


def test_the_file_system_of_a_path_is_read_from_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert fs_type("/etc", str(info)) == "ext4"
    assert fs_type("/mnt/nfs/runs/does/not/exist", str(info)) in ("nfs4", "ext4")  # its nearest existing ancestor
    assert fs_type("/", str(info)) == "ext4"
    assert fs_type(str(tmp_path), str(tmp_path / "missing")) is None


def test_network_and_fuse_file_systems_are_polled(tmp_path: Path, monkeypatch: object) -> None:
    import alertd.sources.watch as watch

    for kind, local in (("ext4", True), ("tmpfs", True), ("overlay", True), ("nfs4", False), ("fuse.sshfs", False)):
        setattr(watch, "fs_type", lambda path, kind=kind: kind)  # noqa: B010
        try:
            assert watch.notifications_arrive("/x") == (local, kind)
        finally:
            watch.fs_type = fs_type
    assert notifications_arrive(str(tmp_path))[0] is True  # this machine's temp directory is local
