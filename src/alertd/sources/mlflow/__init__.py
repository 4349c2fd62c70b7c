"""The `mlflow` source: MLflow runs from a local file store or a tracking server.

The tracking URI (`tracking_uri`, else MLFLOW_TRACKING_URI) picks the reader:

- `http://...` or `https://...`: the tracking server's REST API (`alertd.sources.mlflow.rest`);
- a directory (`mlruns`, `./mlruns`, `/abs/mlruns`, `file:/abs/mlruns`, `file:///abs/mlruns`): the
  file store, tailed (`alertd.sources.mlflow.filestore`).

Other schemes (`sqlite:`, `postgresql:`, `databricks`, ...) are refused with a non-recoverable
`SourceError` at the first poll: point alertd at the tracking server in front of that database.

Samples, either way: the metric is the MLflow key (`train/loss`), labels `source`, `run` (run id),
`run_name` and `experiment` (its name); time is the point's timestamp, step its step, value as
logged, NaN and ±Inf kept (see `alertd.sources.mlflow.values` for how each store spells them). Once
per run end, `run.finished` = 1 and `run.crashed` (1 for FAILED or KILLED, 0 for FINISHED) at the
run's end time. The first poll returns all the history of the runs it reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from alertd.errors import SourceError
from alertd.model import Sample
from alertd.sources.config import MlflowConfig
from alertd.sources.mlflow.filestore import FileStoreSource, file_root
from alertd.sources.mlflow.rest import RestSource

__all__ = ["FileStoreSource", "MlflowSource", "RestSource"]


def _scheme(uri: str) -> str:
    """The URI scheme, or "" for a plain path (a Windows drive letter is a path too)."""
    head, sep, _ = uri.partition(":")
    if head.lower() == "databricks":  # `databricks` alone names the workspace too
        return "databricks"
    if not sep or len(head) < 2 or not head.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return ""
    return head.lower()


class MlflowSource:
    """Reads MLflow runs; delegates to the file-store or the REST reader by the tracking URI."""

    def __init__(self, cfg: MlflowConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.cfg = cfg
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
        self.backend: FileStoreSource | RestSource | None = None
        self._error: SourceError | None = None
        scheme = _scheme(uri)
        if not uri:
            self._error = SourceError(
                f"mlflow source {cfg.name}: no tracking URI (set tracking_uri or MLFLOW_TRACKING_URI)",
                recoverable=False,
            )
        elif scheme in ("http", "https"):
            self.backend = RestSource(cfg, uri)
        elif scheme in ("", "file"):
            try:
                self.backend = FileStoreSource(cfg, file_root(uri))
            except ValueError as exc:
                self._error = SourceError(f"mlflow source {cfg.name}: {exc}", recoverable=False)
        else:
            self._error = SourceError(
                f"mlflow source {cfg.name}: a {scheme}: tracking URI is not read directly; give the URL of the "
                "tracking server in front of it (http:// or https://) or a file store directory",
                recoverable=False,
            )

    def __repr__(self) -> str:
        return f"MlflowSource({self.backend!r})"

    async def poll(self, now: float) -> Sequence[Sample]:
        """New samples since the last poll (all history at the first)."""
        if self.backend is None:
            assert self._error is not None
            raise self._error
        return await self.backend.poll(now)

    def take_cuts(self) -> list[str]:
        """What the backend's polls left out at a limit (`alertd.sources.limits`)."""
        take = getattr(self.backend, "take_cuts", None)
        return take() if take is not None else []

    async def aclose(self) -> None:
        """Release the backend's files or HTTP client."""
        if self.backend is not None:
            await self.backend.aclose()

    def cursor(self) -> dict[str, Any]:
        """The backend's cursor (JSON-able)."""
        return self.backend.cursor() if self.backend is not None else {}

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a `cursor()`."""
        if self.backend is not None:
            self.backend.restore(cursor)
