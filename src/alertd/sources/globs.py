"""File globs of the file sources (`textlog`, `csv`): which files match, and the run each one is.

A `path` is a file or a glob (`*`, `?`, `[...]`, and `**` for any depth). Its directory part — the
leading components without a wildcard — is the base: a file's `run` label is its path relative to it
(`logs/*.log` and `logs/exp1.log` give `exp1.log`; a plain `train.log` gives `train.log`).
"""

from __future__ import annotations

import glob
import os

MAX_FILES = 10_000
"""Files one glob may match; past that the rest are ignored (and the caller warns)."""


def glob_base(pattern: str) -> str:
    """The directory part of `pattern` that has no wildcard (`.` when there is none)."""
    parts = pattern.replace(os.sep, "/").split("/")
    fixed: list[str] = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        fixed.append(part)
    base = "/".join(fixed)
    if pattern.startswith("/") and not base:
        return "/"
    return base or "."


def matching_files(pattern: str) -> list[str]:
    """The regular files `pattern` matches now, sorted, at most MAX_FILES (a FIFO or directory never)."""
    if not glob.has_magic(pattern):
        return [pattern] if os.path.isfile(pattern) else []
    out: list[str] = []
    for path in glob.iglob(pattern, recursive=True):
        if os.path.isfile(path):
            out.append(path)
            if len(out) >= MAX_FILES:
                break
    out.sort()
    return out


def run_of(path: str, base: str) -> str:
    """The `run` label of `path`: its path relative to the glob's base, with `/`."""
    rel = os.path.relpath(path, base)
    return rel.replace(os.sep, "/")
