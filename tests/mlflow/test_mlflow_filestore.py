"""The mlflow source over a file store that MLflow's own client writes."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow_kit import T0_MS, ends, log_points, points, same

from alertd.model import Sample
from alertd.sources.config import MlflowConfig
from alertd.sources.mlflow import FileStoreSource, MlflowSource

NAN, INF = math.nan, math.inf


def source(uri: str | Path, **kw: Any) -> MlflowSource:
    """An mlflow source named `mf` on `uri`."""
    return MlflowSource(MlflowConfig.model_validate({"type": "mlflow", "name": "mf", "tracking_uri": str(uri), **kw}))


def poll(src: MlflowSource) -> list[Sample]:
    """One poll, now."""
    return list(asyncio.run(src.poll(time.time())))


def test_history_with_nan_at_its_step_and_each_run_end_once(file_client: Any, mlruns: Path) -> None:
    exp = file_client.create_experiment("exp-a")
    good = file_client.create_run(exp, run_name="good", start_time=T0_MS).info.run_id
    log_points(file_client, good, "train/loss", [1.0, 0.9, 0.8, NAN, 0.7])
    log_points(file_client, good, "lr", [1e-3, INF, -INF])
    file_client.set_terminated(good, "FINISHED", end_time=T0_MS + 10_000)
    failed = file_client.create_run(exp, run_name="bad").info.run_id
    log_points(file_client, failed, "train/loss", [2.0, 1.5])
    file_client.set_terminated(failed, "FAILED", end_time=T0_MS + 20_000)
    killed = file_client.create_run(exp, run_name="stopped").info.run_id
    file_client.set_terminated(killed, "KILLED", end_time=T0_MS + 30_000)
    # What is not read: a deleted run, a deleted experiment (in .trash), the model registry, stray dirs.
    deleted = file_client.create_run(exp, run_name="deleted").info.run_id
    log_points(file_client, deleted, "train/loss", [5.0])
    file_client.delete_run(deleted)
    gone = file_client.create_experiment("gone")
    log_points(file_client, file_client.create_run(gone).info.run_id, "train/loss", [6.0])
    file_client.delete_experiment(gone)
    (mlruns / "models" / "m1").mkdir(parents=True)
    (mlruns / exp / "notes").mkdir()

    src = source(mlruns, runs="all")
    out = poll(src)

    assert same(points(out, "train/loss", good), [(0, 1.0), (1, 0.9), (2, 0.8), (3, NAN), (4, 0.7)])
    assert same(points(out, "lr", good), [(0, 1e-3), (1, INF), (2, -INF)])
    assert same(points(out, "train/loss", failed), [(0, 2.0), (1, 1.5)])
    assert {s.series.label("run") for s in out} == {good, failed, killed}
    nan = next(s for s in out if s.series.metric == "train/loss" and s.step == 3)
    assert math.isnan(nan.value) and nan.time == (T0_MS + 3000) / 1000
    assert nan.series.label_dict() == {"source": "mf", "run": good, "run_name": "good", "experiment": "exp-a"}
    t0 = T0_MS / 1000
    assert ends(out) == {
        (good, "run.finished"): [(t0 + 10, 1.0)],
        (good, "run.crashed"): [(t0 + 10, 0.0)],
        (failed, "run.finished"): [(t0 + 20, 1.0)],
        (failed, "run.crashed"): [(t0 + 20, 1.0)],
        (killed, "run.finished"): [(t0 + 30, 1.0)],
        (killed, "run.crashed"): [(t0 + 30, 1.0)],
    }
    assert poll(src) == []

    again = source(mlruns, runs="all")
    again.restore(json.loads(json.dumps(src.cursor())))  # as the service saves it
    assert poll(again) == []


def test_a_poll_reads_only_the_new_points_and_the_end_once(file_client: Any, mlruns: Path) -> None:
    exp = file_client.create_experiment("exp-b")
    old = file_client.create_run(exp, run_name="old", start_time=T0_MS).info.run_id
    log_points(file_client, old, "loss", [9.0])
    file_client.set_terminated(old, "FINISHED")
    live = file_client.create_run(exp, run_name="live").info.run_id
    log_points(file_client, live, "loss", [3.0, 2.5, 2.0])

    src = source(f"file://{mlruns}", runs="running")
    assert same(points(poll(src), "loss"), [(0, 3.0), (1, 2.5), (2, 2.0)])  # the run ended before: skipped
    log_points(file_client, live, "loss", [1.5, NAN], first_step=3)
    flash = file_client.create_run(exp, run_name="flash").info.run_id  # started and crashed between two polls
    log_points(file_client, flash, "loss", [7.0])
    file_client.set_terminated(flash, "FAILED", end_time=T0_MS + 50_000)
    out = poll(src)
    assert same(points(out, "loss", live), [(3, 1.5), (4, NAN)])
    assert points(out, "loss", flash) == [(0, 7.0)] and ends(out)[(flash, "run.crashed")] == [(T0_MS / 1000 + 50, 1.0)]
    assert poll(src) == []

    restarted = source(f"file://{mlruns}", runs="running")  # a restarted service
    restarted.restore(json.loads(json.dumps(src.cursor())))  # as the service saves it
    log_points(file_client, live, "loss", [1.0], first_step=5)
    assert same(points(poll(restarted), "loss"), [(5, 1.0)])

    file_client.set_terminated(live, "FINISHED", end_time=T0_MS + 60_000)
    end = T0_MS / 1000 + 60
    assert ends(poll(restarted)) == {(live, "run.finished"): [(end, 1.0)], (live, "run.crashed"): [(end, 0.0)]}
    assert poll(restarted) == []

    file_client.update_run(live, status="RUNNING")  # resumed, as start_run(run_id=...) does
    log_points(file_client, live, "loss", [0.9], first_step=6)
    assert same(points(poll(restarted), "loss"), [(6, 0.9)])
    file_client.set_terminated(live, "KILLED", end_time=T0_MS + 70_000)  # a second end: reported too
    assert ends(poll(restarted)) == {
        (live, "run.finished"): [(end + 10, 1.0)],
        (live, "run.crashed"): [(end + 10, 1.0)],
    }


def test_a_bad_line_is_logged_with_its_file_and_line_and_skipped(
    file_client: Any, mlruns: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = file_client.create_experiment("exp-c")
    run = file_client.create_run(exp).info.run_id
    log_points(file_client, run, "loss", [1.0, 0.5])
    path = mlruns / exp / run / "metrics" / "loss"
    with open(path, "a") as f:  # a torn or foreign write in the middle of the file
        f.write("1780000002000 lots 2\n")
    log_points(file_client, run, "loss", [0.25], first_step=3)

    with caplog.at_level(logging.WARNING):
        out = poll(source(mlruns, runs="all"))
    assert same(points(out, "loss"), [(0, 1.0), (1, 0.5), (3, 0.25)])
    assert f"{path}:3: skipped: value is not a number: 'lots'" in caplog.text


@pytest.mark.parametrize("form", ["path", "file:path", "file:///path", "./mlruns"])
def test_the_tracking_uri_may_be_any_form_of_the_directory(
    form: str, file_client: Any, mlruns: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = file_client.create_experiment("exp-d")
    log_points(file_client, file_client.create_run(exp).info.run_id, "loss", [1.0, 2.0])
    monkeypatch.chdir(mlruns.parent)
    uri = {"path": str(mlruns), "file:path": f"file:{mlruns}", "file:///path": f"file://{mlruns}"}.get(form, form)
    src = source(uri, runs="all")
    assert isinstance(src.backend, FileStoreSource)
    assert len(points(poll(src), "loss")) == 2


def test_experiments_are_chosen_by_id_or_name(file_client: Any, mlruns: Path) -> None:
    a, b, c = (file_client.create_experiment(n) for n in ("alpha", "beta", "gamma"))
    for exp, value in ((a, 1.0), (b, 2.0), (c, 3.0)):
        log_points(file_client, file_client.create_run(exp).info.run_id, "loss", [value])
    out = poll(source(mlruns, runs="all", experiments=["alpha", c]))
    assert sorted(s.series.label("experiment") or "" for s in out if s.series.metric == "loss") == ["alpha", "gamma"]


def test_a_store_not_there_yet_is_waited_for(tmp_path: Path) -> None:
    src = source(tmp_path / "later", runs="all")
    assert poll(src) == []


LAUGHS = "".join(  # each line nine aliases of the one before: *h stands for 9**8 = 43 million strings
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9) if prev else ','.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)
MERGES = "".join(  # merge keys (`<<`) copy their mapping: each level doubles it
    f"k{i}: &k{i} {{<<: [*k{i - 1}, *k{i - 1}], x{i}: 1}}\n" if i else "k0: &k0 {a: 1}\n" for i in range(40)
)
WIDE = "s: &s " + "x" * 4000 + "\nl: [" + ",".join(["*s"] * 100) + "]\n"  # 4 kB said 100 times: 400 kB of text


@pytest.mark.parametrize(
    ("bomb", "limit"),
    [
        (LAUGHS + "run_name: *i\n", "more than 1000 values"),
        (MERGES + "run_name: *k39\n", "more than 1000 values"),
        (WIDE + "run_name: x\n", f"more than {64 << 10} characters"),
    ],
)
def test_an_alias_bomb_in_a_meta_yaml_is_refused_unread_naming_the_limit(bomb: str, limit: str, tmp_path: Path) -> None:
    from alertd.sources.mlflow.filestore import OverLimit, read_meta

    path = tmp_path / "meta.yaml"
    path.write_text("run_id: abc\nstatus: 1\n" + bomb)
    assert len(path.read_bytes()) < 64 << 10
    with pytest.raises(OverLimit, match=f"{limit}.*over the limit of a meta.yaml"):
        read_meta(str(path))  # refused before anything is built: no MemoryError, no expansion at str()


def test_a_store_with_a_bomb_for_a_meta_yaml_reads_its_other_runs_and_says_which_limit(
    file_client: Any, mlruns: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = file_client.create_experiment("exp-bomb")
    good = file_client.create_run(exp, run_name="good").info.run_id
    log_points(file_client, good, "loss", [1.0, NAN])
    bomb = file_client.create_run(exp, run_name="bomb").info.run_id
    log_points(file_client, bomb, "loss", [2.0])
    meta = mlruns / exp / bomb / "meta.yaml"
    meta.write_text(LAUGHS + meta.read_text().replace("run_name: bomb", "run_name: *h"))  # 2 kB
    src = source(mlruns, runs="all")
    with caplog.at_level(logging.WARNING):
        out = poll(src)
        again = poll(src)
    assert same(points(out, "loss"), [(0, 1.0), (1, NAN)]) and {s.series.label("run") for s in out} == {good}
    assert again == []
    (cut,) = src.take_cuts()  # in the source's health: both polls met it, said once
    assert f"{meta}: skipped: the document expands to more than 1000 values" in cut
    assert "over the limit of a meta.yaml" in cut and str(meta) in caplog.text
    assert caplog.text.count("over the limit of a meta.yaml") == 1  # logged once per version of the file
    assert src.take_cuts() == []
    meta.write_text(meta.read_text().replace(LAUGHS, "").replace("*h", "fixed"))  # mended: read from its start
    assert same(points(poll(src), "loss", bomb), [(0, 2.0)])
