"""Which rank of a distributed run this process is: the labels each of its samples carries.

`rank` (the global rank), `local_rank` (on its node), `world_size` and `node` (the node's index), each where
known: from `torch.distributed` when it is initialised (rank and world size; torch is never imported here, only
looked at when the training script imported it), else from the environment torchrun sets (`RANK`, `LOCAL_RANK`,
`WORLD_SIZE`, `GROUP_RANK`) or Slurm's (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`, `SLURM_NODEID`). A
one-process run (none of these set, torch.distributed not initialised) has no rank labels at all, so its samples
are what they always were.

`rank_path(path, rank)`: the samples file of a rank. Every rank appends to the same file by default (see
`alertd.integrations.samples_writer`); a path holding `{rank}` gives a file per rank (for a shared file system
whose appends are not atomic across nodes, such as NFS).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

RANK_ENVS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rank", ("RANK", "SLURM_PROCID")),
    ("local_rank", ("LOCAL_RANK", "SLURM_LOCALID")),
    ("world_size", ("WORLD_SIZE", "SLURM_NTASKS")),
    ("node", ("GROUP_RANK", "SLURM_NODEID")),
)


def _dist_rank() -> tuple[int, int] | None:
    """(rank, world size) from torch.distributed when the script imported it and initialised it."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except (RuntimeError, ValueError):
        return None
    return None


def rank_labels(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's rank labels (`rank`, `local_rank`, `world_size`, `node`, those known); {} in a one-process
    run. `env`: the environment (default `os.environ`)."""
    environ = os.environ if env is None else env
    labels: dict[str, str] = {}
    for label, names in RANK_ENVS:
        for name in names:
            value = environ.get(name, "").strip()
            if value.isdigit():
                labels[label] = str(int(value))
                break
    found = _dist_rank() if env is None else None
    if found is not None and (found[1] > 1 or "rank" in labels):
        labels["rank"], labels["world_size"] = str(found[0]), str(found[1])
    if "rank" not in labels:
        return {}
    return labels


def rank_path(path: str, rank: str | None) -> str:
    """`path` with `{rank}` replaced by the rank (0 in a one-process run)."""
    return path.replace("{rank}", rank or "0") if "{rank}" in path else path
