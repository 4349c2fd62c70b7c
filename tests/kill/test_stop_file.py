"""StopFileNotifier: the file a training loop polls, written once per firing, never outside its place."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pydantic
import pytest
from kill_helpers import firing, notification

from alertd.actions.config import StopFileConfig
from alertd.actions.stop_file import StopFileNotifier
from alertd.errors import NotifyError
from alertd.model import TransitionKind

pytestmark = pytest.mark.anyio


def stop_cfg(path: str, base_dir: str | None = None) -> StopFileConfig:
    """A stop_file config."""
    return StopFileConfig.model_validate({"type": "stop_file", "path": path, "base_dir": base_dir})


async def test_creates_the_file_with_the_reason(tmp_path: Path) -> None:
    """The file appears at the expanded path with rule, labels, value, step and time; no temp file left."""
    (tmp_path / "exp1").mkdir()
    notifier = StopFileNotifier("stopper", stop_cfg(str(tmp_path) + "/{run}/STOP"))
    alert = firing({"run": "exp1", "metric": "loss", "source": "tb"}, step=1200, value=math.nan)
    await notifier.send(notification(alert))
    body = json.loads((tmp_path / "exp1" / "STOP").read_text())
    (report,) = notifier.history
    assert report.refused is None and report.summary() == (
        f"stop_file stopper for loss_not_finite: asked the run to stop via {tmp_path}/exp1/STOP"
    )
    assert body["rule"] == "loss_not_finite" and body["state"] == "firing"
    assert body["labels"] == {"run": "exp1", "metric": "loss", "source": "tb"}
    assert body["value"] == "NaN" and body["step"] == 1200
    assert body["time"].endswith("Z") and body["summary"] == "loss is NaN"
    assert body["notifier"] == "stopper"
    assert sorted(p.name for p in (tmp_path / "exp1").iterdir()) == ["STOP"]
    assert (tmp_path / "exp1" / "STOP").stat().st_mode & 0o777 == 0o644


async def test_once_per_firing_and_never_on_resolution(tmp_path: Path) -> None:
    """The loop consumed the file: a repeat of the same firing doesn't recreate it, a new firing does."""
    path = tmp_path / "r" / "STOP"
    path.parent.mkdir()
    notifier = StopFileNotifier("s", stop_cfg("{run}/STOP", base_dir=str(tmp_path)))
    alert = firing({"run": "r"}, active_at=time.time() - 30)
    await notifier.send(notification(alert))
    assert path.exists()
    path.unlink()
    await notifier.send(notification(alert))
    await notifier.send(notification(firing({"run": "r"}, active_at=alert.active_at)))
    await notifier.send(notification(firing({"run": "r"}, state=TransitionKind.RESOLVED)))
    assert not path.exists()
    await notifier.send(notification(firing({"run": "r"}, active_at=time.time())))
    assert path.exists()


async def test_nested_run_names_and_literal_braces(tmp_path: Path) -> None:
    """Run names with slashes stay inside base_dir; {{ and }} are literal braces."""
    (tmp_path / "sweep" / "seed0").mkdir(parents=True)
    notifier = StopFileNotifier("s", stop_cfg("{run}/{{stop}}-{rule_name}", base_dir=str(tmp_path)))
    await notifier.send(notification(firing({"run": "sweep/seed0", "rule_name": "nan"})))
    assert (tmp_path / "sweep" / "seed0" / "{stop}-nan").exists()


async def test_missing_label_is_refused(tmp_path: Path) -> None:
    """A label the template needs but the alert lacks: refused (reported, never retried), nothing written."""
    notifier = StopFileNotifier("s", stop_cfg(str(tmp_path) + "/{run}/STOP"))
    await notifier.send(notification(firing({"metric": "loss"})))
    (report,) = notifier.history
    assert report.refused is not None and "no label 'run'" in report.refused
    assert report.summary().startswith("stop_file s for loss_not_finite: REFUSED: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("run", ["..", "../outside", "a/../../outside", "ok/.."])
async def test_dotdot_is_refused(tmp_path: Path, run: str) -> None:
    """A label value with a `..` part is refused, with or without base_dir."""
    base = tmp_path / "logs"
    (base / "a").mkdir(parents=True)
    (base / "ok").mkdir()
    for cfg in (stop_cfg("{run}/STOP", base_dir=str(base)), stop_cfg(str(base) + "/{run}/STOP")):
        notifier = StopFileNotifier("s", cfg)
        await notifier.send(notification(firing({"run": run})))
        assert "'..' part" in str(notifier.history[0].refused)
    assert not (tmp_path / "STOP").exists() and not (tmp_path / "outside").exists()


async def test_absolute_value_and_symlink_cannot_leave_base_dir(tmp_path: Path) -> None:
    """An absolute label value or a symbolic link pointing out of base_dir is refused."""
    base, outside = tmp_path / "logs", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (base / "link").symlink_to(outside)
    notifier = StopFileNotifier("s", stop_cfg("{run}/STOP", base_dir=str(base)))
    for run in (str(outside), "link"):
        await notifier.send(notification(firing({"run": run}, active_at=time.time())))
    assert [("leaves base_dir" in str(r.refused)) for r in notifier.history] == [True, True]
    assert list(outside.iterdir()) == []


async def test_missing_directory_is_not_created(tmp_path: Path) -> None:
    """A run directory that isn't there is an error naming it; no directory is made."""
    notifier = StopFileNotifier("s", stop_cfg(str(tmp_path) + "/{run}/STOP"))
    await notifier.send(notification(firing({"run": "gone"})))
    assert "does not exist" in str(notifier.history[0].refused) and not (tmp_path / "gone").exists()


async def test_write_error_is_recoverable(tmp_path: Path) -> None:
    """A write that fails for a file-system reason (the path is a directory) may succeed later."""
    (tmp_path / "r" / "STOP").mkdir(parents=True)
    notifier = StopFileNotifier("s", stop_cfg(str(tmp_path) + "/{run}/STOP"))
    with pytest.raises(NotifyError, match="can't write") as err:
        await notifier.send(notification(firing({"run": "r"})))
    assert err.value.recoverable
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["STOP"]  # the temp file was removed
    os.rmdir(tmp_path / "r" / "STOP")
    await notifier.send(notification(firing({"run": "r"})))  # not marked done: the retry writes it
    assert json.loads((tmp_path / "r" / "STOP").read_text())["labels"] == {"run": "r"}


def test_config_errors() -> None:
    """Stray braces, relative paths without base_dir and a relative base_dir are config errors."""
    with pytest.raises(pydantic.ValidationError, match="stray '\\{' at column 7"):
        stop_cfg("/runs/{run/STOP")
    with pytest.raises(pydantic.ValidationError, match="stray '\\{' at column 7"):
        stop_cfg("/runs/{run.__class__}/STOP")
    with pytest.raises(pydantic.ValidationError, match="must be absolute unless base_dir"):
        stop_cfg("{run}/STOP")
    with pytest.raises(pydantic.ValidationError, match="base_dir must be an absolute path"):
        stop_cfg("{run}/STOP", base_dir="logs")
