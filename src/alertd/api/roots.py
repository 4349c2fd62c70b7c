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


def find_sources(roots: Sequence[str]) -> list[dict[str, str]]:
    """The readable sources under `roots`, in walk order (roots first, then depth-first by name)."""
    found: list[dict[str, str]] = []
    seen = 0

    def add(kind: str, path: str) -> None:
        if len(found) < MAX_FOUND:
            found.append({"type": kind, "path": path})

    def walk(path: str, depth: int) -> None:
        nonlocal seen
        if depth > MAX_DEPTH or seen >= MAX_ENTRIES or len(found) >= MAX_FOUND:
            return
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        seen += len(entries)
        dirs = []
        events = wandb = False
        for e in entries[:MAX_ENTRIES]:
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = e.is_file(follow_symlinks=False)
            except OSError:
                continue
            name = e.name
            if is_dir:
                if name == "mlruns":
                    add("mlflow", e.path)
                    continue
                dirs.append(e.path)
            elif is_file:
                if "tfevents" in name:
                    events = True
                elif name.endswith(".wandb"):
                    wandb = True
                elif name.endswith(".jsonl"):
                    add("samples", e.path)
                elif name.endswith(".log"):
                    add("textlog", e.path)
                elif name.endswith(".csv"):
                    add("csv", e.path)
        if events:
            add("tensorboard", path)
        if wandb:
            add("wandb_dir", path)
        for d in dirs:
            walk(d, depth + 1)

    for root in roots:
        walk(os.path.abspath(root), 0)
    return found


def roots_routes(api: APIRouter, roots: Sequence[str]) -> None:
    @api.get("/dry-run/sources")
    async def dry_run_sources() -> dict[str, Any]:
        """The allowed roots, and the recorded runs a dry run can read under them (`type` and `path`, as
        `POST /api/v1/dry-run` takes them in `source`)."""
        listed = [os.path.abspath(r) for r in roots]
        found = await asyncio.to_thread(find_sources, listed) if listed else []
        return {"roots": listed, "sources": found}
