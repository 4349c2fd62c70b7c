"""The `wandb_dir` source woken by file-system notifications (`read_changed`), on runs of the real SDK.

What `read_changed` reads must be what a full poll reads of the same files (samples, their order, the
cursor), but only the files that the reported paths name or hold.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from gen_offline import write_runs

from alertd.model import Sample
from alertd.sources.config import WandbDirConfig
from alertd.sources.wandb.offline import WandbDirSource, find_run_files

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def sdk_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run directories of the offline runs `good` and `bad` written by gen_offline.py (once)."""
    root = tmp_path_factory.mktemp("sdk")
    write_runs(root)
    runs = {}
    for path in find_run_files(str(root)):
        run_id = Path(path).name.removeprefix("run-").removesuffix(".wandb")
        runs[run_id] = Path(path).parent
    assert set(runs) == {"good", "bad"}
    return runs


def source(path: Path | str) -> WandbDirSource:
    return WandbDirSource(WandbDirConfig(name="wbo", type="wandb_dir", path=str(path)))


def key(samples: list[Sample]) -> list[tuple[object, ...]]:
    return [(s.series, s.time, s.step, "nan" if math.isnan(s.value) else s.value) for s in samples]


def of_run(samples: list[Sample], run: str) -> list[Sample]:
    return [s for s in samples if s.series.label("run") == run]


def full(path: Path | str) -> tuple[list[Sample], dict[str, Any]]:
    """The samples and cursor of a full poll of `path` by a new source."""
    src = source(path)
    return src.read_new(), src.cursor()


def copy_run(run_dir: Path, into: Path, name: str | None = None, cut: int | None = None) -> Path:
    """Copy a run directory into `into` (renamed `name`); its run file cut to `cut` bytes. The run file."""
    dest = into / (name or run_dir.name)
    shutil.copytree(run_dir, dest)
    run_file = next(dest.glob("run-*.wandb"))
    if cut is not None:
        run_file.write_bytes(run_file.read_bytes()[:cut])
    return run_file


def append_rest(run_file: Path, original: Path) -> None:
    data = next(original.glob("run-*.wandb")).read_bytes()
    with run_file.open("ab") as f:
        f.write(data[run_file.stat().st_size :])


def test_a_file_written_after_the_first_read_is_read_by_read_changed(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    good = copy_run(sdk_runs["good"], tmp_path / "wandb", cut=40_000)
    src = source(tmp_path)
    part = src.read_new()
    assert part and src.read_changed(frozenset({str(good)})) == []
    append_rest(good, sdk_runs["good"])
    rest = src.read_changed(frozenset({str(good)}))
    assert rest and src.read_changed(frozenset({str(good)})) == []
    whole, cursor = full(tmp_path)
    assert key(part + rest) == key(whole)
    assert src.cursor() == cursor
    assert src.read_new() == []


@pytest.mark.parametrize(
    "layout",
    ["wandb/{d}/run-{id}.wandb", ".wandb/{d}/run-{id}.wandb", "{d}/run-{id}.wandb", "run-{id}.wandb"],
)
def test_a_new_run_reported_is_found_and_read_in_every_layout(
    sdk_runs: dict[str, Path], tmp_path: Path, layout: str
) -> None:
    root = tmp_path / "train"
    root.mkdir()
    src = source(root)
    assert src.read_new() == []
    got: list[Sample] = []
    for run_id, d in (("good", "offline-run-1-good"), ("bad", "run-2-bad")):
        rel = Path(layout.format(d=d, id=run_id))
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(next(sdk_runs[run_id].glob("run-*.wandb")), target)
        # What the watcher reports first: the directory created right under the root (or the file itself).
        got += src.read_changed(frozenset({str(root / rel.parts[0])}))
        assert of_run(got, run_id), (layout, run_id)
    whole, cursor = full(root)
    assert key(got) == key(of_run(whole, "good") + of_run(whole, "bad"))
    assert src.cursor() == cursor


def test_a_run_directory_reported_inside_wandb_is_read_and_the_order_is_a_full_polls(
    sdk_runs: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "wandb").mkdir()
    src = source(tmp_path)
    assert src.read_new() == []
    good = copy_run(sdk_runs["good"], tmp_path / "wandb")
    bad = copy_run(sdk_runs["bad"], tmp_path / "wandb")
    # Both run directories reported, and one of their files too: each file is read once, in a full poll's order.
    got = src.read_changed(frozenset({str(bad.parent), str(good.parent), str(bad)}))
    whole, cursor = full(tmp_path)
    assert key(got) == key(whole)
    assert src.cursor() == cursor


def test_the_root_reported_is_a_full_read(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "later"
    src = source(root)
    assert src.read_changed(frozenset({str(root)})) == []  # not there yet
    copy_run(sdk_runs["good"], root / "wandb")
    copy_run(sdk_runs["bad"], root / "wandb")
    got = src.read_changed(frozenset({str(root)}))
    whole, cursor = full(root)
    assert key(got) == key(whole) and src.cursor() == cursor


def test_paths_outside_the_tree_or_unknown_are_ignored(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "train"
    good = copy_run(sdk_runs["good"], root / "wandb")
    src = source(root)
    src.read_new()
    before = src.cursor()
    # Real run files where find_run_files does not look, and paths that are no run file at all.
    elsewhere = copy_run(sdk_runs["bad"], tmp_path / "elsewhere")
    deep = copy_run(sdk_runs["bad"], good.parent / "files")
    wrong_depth = root / "wandb" / "run-bad.wandb"
    shutil.copyfile(elsewhere, wrong_depth)
    other = root / "notes" / "run-bad.wandb"
    other.parent.mkdir()
    shutil.copyfile(elsewhere, other)
    reported = {
        str(elsewhere),
        str(elsewhere.parent),
        str(deep),
        str(deep.parent),
        str(wrong_depth),
        str(other),
        str(other.parent),
        str(good.parent / "files" / "output.log"),
        str(root / "wandb" / "offline-run-gone"),
        str(root / "run-gone.wandb"),
        str(root) + "-sibling/run-x.wandb",
        "/",
        "relative/run-x.wandb",
    }
    assert src.read_changed(frozenset(reported)) == []
    assert src.cursor() == before
    assert src.read_new() == []  # a full poll agrees: none of them is a run file of this source


def test_a_change_not_reported_is_not_read_until_the_full_poll(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    good = copy_run(sdk_runs["good"], tmp_path / "wandb", cut=40_000)
    bad = copy_run(sdk_runs["bad"], tmp_path / "wandb", cut=200)
    src = source(tmp_path)
    first = src.read_new()
    append_rest(good, sdk_runs["good"])
    append_rest(bad, sdk_runs["bad"])
    woken = src.read_changed(frozenset({str(good)}))
    assert of_run(woken, "good") and of_run(woken, "bad") == []  # the bad run's file was not read
    polled = src.read_new()
    assert of_run(polled, "good") == [] and of_run(polled, "bad")
    whole, cursor = full(tmp_path)
    got = first + woken + polled
    assert key(of_run(got, "good")) == key(of_run(whole, "good"))
    assert key(of_run(got, "bad")) == key(of_run(whole, "bad"))
    assert src.cursor() == cursor


def test_every_path_of_a_tree_reported_finds_exactly_what_find_run_files_finds(tmp_path: Path) -> None:
    root = tmp_path / "t"
    names = [
        "run-a.wandb",
        "run-a.txt",
        "x-run-a.wandb",
        "run-d/run-d.wandb",
        "run-d/other.wandb",
        "offline-run-e/run-e.wandb",
        "offline-run-e/files/run-e.wandb",
        "wandb/run-f/run-f.wandb",
        "wandb/offline-run-g/run-g.wandb",
        "wandb/offline-run-g/run-g2.wandb",
        "wandb/run-h.wandb",
        "wandb/latest-run/run-g.wandb",
        ".wandb/offline-run-i/run-i.wandb",
        "other/run-j/run-j.wandb",
        "run-k/run-k/run-k.wandb",
        "run-dir.wandb/run-l.wandb",
        "[x]/run-m.wandb",
        "run-[n]/run-n.wandb",
        "run-*/run-o.wandb",
    ]
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (root / "wandb" / "run-dir.wandb").mkdir()
    (root / "run-d" / "run-sub.wandb").mkdir()
    os.symlink(root / "missing", root / "wandb" / "run-f" / "run-broken.wandb")
    os.mkfifo(root / "offline-run-e" / "run-fifo.wandb")
    os.symlink(root / "wandb" / "offline-run-g", root / "wandb" / "run-link")
    every = {str(root)}
    for top, dirs, files in os.walk(root):
        every.update(os.path.join(top, n) for n in dirs + files)
    every.remove(str(root))
    want = set(find_run_files(str(root)))
    assert len(want) >= 10
    for reported in (every, {os.path.join(str(root), n) for n in os.listdir(root)}):
        src = source(root)
        src.read_changed(frozenset(reported))
        assert set(src.cursor()["files"]) == want
    # One by one, deepest first: what each path finds is a part of what find_run_files finds.
    src = source(root)
    for path in sorted(every, key=lambda p: -p.count(os.sep)):
        src.read_changed(frozenset({path}))
        assert set(src.cursor()["files"]) <= want
    assert set(src.cursor()["files"]) == want


def test_a_relative_path_gives_the_file_names_of_a_full_poll(
    sdk_runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    good = copy_run(sdk_runs["good"], tmp_path / "runs" / "wandb")
    src = source("./runs/")
    got = src.read_changed(frozenset({str(good)}))
    whole, cursor = full("./runs/")
    assert key(got) == key(whole) and src.cursor() == cursor
    assert list(cursor["files"]) == [f"./runs/wandb/{good.parent.name}/{good.name}"]


def test_a_run_file_deleted_is_not_read(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    good = copy_run(sdk_runs["good"], tmp_path / "wandb", cut=40_000)
    src = source(tmp_path)
    src.read_new()
    before = src.cursor()
    good.unlink()
    assert src.read_changed(frozenset({str(good), str(good.parent)})) == []
    assert src.cursor() == before


@pytest.mark.anyio
async def test_poll_changed(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    good = copy_run(sdk_runs["good"], tmp_path / "wandb")
    src = source(tmp_path)
    got = list(await src.poll_changed(0.0, frozenset({str(good.parent)})))
    assert key(got) == key(full(tmp_path)[0])
    assert list(await src.poll_changed(0.0, frozenset({str(good)}))) == []
