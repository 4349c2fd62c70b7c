"""Which class serves which source type. Modules are imported only when their type is used."""

from __future__ import annotations

import glob
import importlib
import os

from alertd.sources.base import Source
from alertd.sources.config import FileSourceConfig, SourceConfig
from alertd.sources.globs import glob_base
from alertd.sources.watch import WatchDir

SOURCES: dict[str, str] = {
    "tensorboard": "alertd.sources.tensorboard:TensorBoardSource",
    "nvml": "alertd.sources.nvml:NvmlSource",
    "wandb": "alertd.sources.wandb:WandbSource",
    "wandb_dir": "alertd.sources.wandb:WandbDirSource",
    "samples": "alertd.sources.samples:SamplesSource",
    "textlog": "alertd.sources.textlog:TextLogSource",
    "csv": "alertd.sources.csvfile:CsvSource",
    "mlflow": "alertd.sources.mlflow:MlflowSource",
    "slurm": "alertd.sources.slurm:SlurmSource",
    "prometheus": "alertd.sources.prometheus:PrometheusSource",
}

REPLAYABLE = ("tensorboard", "wandb_dir", "wandb", "samples", "textlog", "csv", "mlflow")
"""Source types that hold history a dry-run can replay (NVML only knows the present)."""


def build_source(cfg: SourceConfig, root_run: str | None = None) -> Source:
    """The source object for one `sources:` entry; `root_run`: for a TensorBoard source, the run label of the
    event files right in its logdir (a dry-run's: `dryrun.root_run_name`), where not the service's `.`."""
    module, _, cls = SOURCES[cfg.type].partition(":")
    factory = getattr(importlib.import_module(module), cls)
    source: Source = factory(cfg)
    if root_run is not None:
        from alertd.sources.tensorboard import TensorBoardSource  # here: imported above where it is one

        if isinstance(source, TensorBoardSource):
            source.root_run = root_run
    return source


def watch_dirs(cfg: SourceConfig, source: Source) -> list[WatchDir]:
    """The directories whose changes concern a file source (none: it is polled)."""
    if not isinstance(cfg, FileSourceConfig):
        return []
    path = getattr(cfg, "logdir", None) or getattr(cfg, "path", None)
    if cfg.type in ("tensorboard", "wandb_dir") and path:
        return [WatchDir(os.path.abspath(path), tree=True)]
    if cfg.type == "samples" and path:
        return [WatchDir(os.path.abspath(os.path.dirname(path) or "."), tree=False)]
    if cfg.type in ("textlog", "csv") and path:
        if not glob.has_magic(path):
            return [WatchDir(os.path.abspath(os.path.dirname(path) or "."), tree=False)]
        base = glob_base(path)
        tree = glob.has_magic(os.path.dirname(path)) or "**" in path
        return [WatchDir(os.path.abspath(base), tree=tree)]
    root = getattr(getattr(source, "backend", None), "root", None)  # mlflow: a file store's directory
    if cfg.type == "mlflow" and isinstance(root, str):
        return [WatchDir(os.path.abspath(root), tree=True)]
    return []
