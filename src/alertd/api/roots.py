"""`GET /api/v1/dry-run/sources`: what a dry run may read under the allowed roots (`ALERTD_DRY_RUN_ROOTS`).

A bounded walk (in a worker thread): at most `MAX_DEPTH` directories deep, `MAX_ENTRIES` entries looked
at, `MAX_FOUND` answers; symbolic links are never followed. What it finds, by the shapes the sources read:
a directory holding TensorBoard event files (`tensorboard`), a W&B run directory or a directory holding
`run-*.wandb` files (`wandb_dir`), an `mlruns` file store (`mlflow`), `*.jsonl` (`samples`), `*.log`
(`textlog`) and `*.csv` (`csv`) files. Paths are answered as the dry run takes them (absolute).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter

MAX_DEPTH = 4
MAX_ENTRIES = 20_000
MAX_FOUND = 500


_FILE_KINDS = ((".jsonl", "samples"), (".log", "textlog"), (".csv", "csv"))
"""File name endings and the source type that reads such a file."""


class _Walk:
    """One bounded walk: what it found, and how many entries it looked at."""

    def __init__(self) -> None:
        self.found: list[dict[str, str]] = []
        self.seen = 0

    def add(self, kind: str, path: str) -> None:
        if len(self.found) < MAX_FOUND:
            self.found.append({"type": kind, "path": path})

    def full(self) -> bool:
        return self.seen >= MAX_ENTRIES or len(self.found) >= MAX_FOUND

    def walk(self, path: str, depth: int) -> None:
        if depth > MAX_DEPTH or self.full():
            return
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        self.seen += len(entries)
        dirs: list[str] = []
        marks: set[str] = set()  # "tensorboard", "wandb_dir": the directory itself is one
        for e in entries[:MAX_ENTRIES]:
            try:
                is_dir, is_file = e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and e.name == "mlruns":
                self.add("mlflow", e.path)
            elif is_dir:
                dirs.append(e.path)
            elif is_file:
                self._file(e.name, e.path, marks)
        for kind in ("tensorboard", "wandb_dir"):
            if kind in marks:
                self.add(kind, path)
        for d in dirs:
            self.walk(d, depth + 1)

    def _file(self, name: str, path: str, marks: set[str]) -> None:
        """One file: a source of its own, or a mark that its directory is one."""
        if "tfevents" in name:
            marks.add("tensorboard")
        elif name.endswith(".wandb"):
            marks.add("wandb_dir")
        else:
            kind = next((k for end, k in _FILE_KINDS if name.endswith(end)), None)
            if kind is not None:
                self.add(kind, path)


def find_sources(roots: Sequence[str]) -> list[dict[str, str]]:
    """The readable sources under `roots`, in walk order (roots first, then depth-first by name)."""
    walk = _Walk()
    for root in roots:
        walk.walk(os.path.abspath(root), 0)
    return walk.found


def roots_routes(api: APIRouter, roots: Sequence[str]) -> None:
    @api.get("/dry-run/sources")
    async def dry_run_sources() -> dict[str, Any]:
        """The allowed roots, and the recorded runs a dry run can read under them (`type` and `path`, as
        `POST /api/v1/dry-run` takes them in `source`)."""
        listed = [os.path.abspath(r) for r in roots]
        found = await asyncio.to_thread(find_sources, listed) if listed else []
        return {"roots": listed, "sources": found}
