"""Which class serves which source type. Modules are imported only when their type is used."""

from __future__ import annotations

import importlib

from alertd.sources.base import Source
from alertd.sources.config import SourceConfig

SOURCES: dict[str, str] = {
    "tensorboard": "alertd.sources.tensorboard:TensorBoardSource",
    "nvml": "alertd.sources.nvml:NvmlSource",
    "wandb": "alertd.sources.wandb:WandbSource",
    "wandb_dir": "alertd.sources.wandb:WandbDirSource",
    "samples": "alertd.sources.samples:SamplesSource",
    "textlog": "alertd.sources.textlog:TextLogSource",
    "csv": "alertd.sources.csvfile:CsvSource",
    "mlflow": "alertd.sources.mlflow:MlflowSource",
}

REPLAYABLE = ("tensorboard", "wandb_dir", "wandb", "samples", "textlog", "csv", "mlflow")
"""Source types that hold history a dry-run can replay (NVML only knows the present)."""


def build_source(cfg: SourceConfig) -> Source:
    """The source object for one `sources:` entry."""
    module, _, cls = SOURCES[cfg.type].partition(":")
    factory = getattr(importlib.import_module(module), cls)
    source: Source = factory(cfg)
    return source
