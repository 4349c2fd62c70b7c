"""What the ranks of a distributed run agree on at each step boundary: whether to stop, and alertd's commands.

A stop request (the stop file, a signal) may reach only some ranks, and alertd's commands may be read by some
ranks and not yet by others (a rank reads the commands directory a moment before or after another, a node
has its own directory). Applied by one rank alone, a `lr_scale` or a `skip_step` would make the replicas part
for good; a stop on one rank would leave the others waiting in their next collective. So at every boundary
`agree()` makes one all-reduce (MAX) of two numbers: whether this rank was asked to stop, and how many new
commands it read. When a rank read any, one `all_gather_object` brings every rank's commands to all, and each
takes their union (one per name, in name order: oldest first). Every rank then carries out the same commands
at the same step and stops at the same step (a rank not asked itself gives the reason `other_rank`).

In a one-process run, or where `torch.distributed` is not initialised (or has one process), nothing is
exchanged and nothing of torch is imported. The flag lives on the NCCL backend's device, else on the CPU.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypeVar

OTHER_RANK = "other_rank"

T = TypeVar("T")


def distributed() -> Any | None:
    """`torch.distributed` when the training script initialised it with more than one process, else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except (RuntimeError, ValueError):
        return None
    return None


def agree(reason: str | None, read: Sequence[T], key: Any, device: Any = None) -> tuple[str | None, list[T]]:
    """(the stop reason: this rank's `reason`, else `OTHER_RANK` when another rank was asked, else None; every
    rank's new commands `read`, one per `key(item)`, sorted by it). `device`: where the flag lives (default: the
    NCCL backend's CUDA device, else the CPU)."""
    dist = distributed()
    if dist is None:
        return reason, list(read)
    import torch

    if device is None:
        device = "cpu"
        if dist.get_backend() == "nccl" and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
    flags = torch.tensor([0 if reason is None else 1, len(read)], device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    stop, commands = (int(x) for x in flags.tolist())
    if reason is None and stop:
        reason = OTHER_RANK
    if not commands:
        return reason, list(read)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(read))
    union: dict[Any, T] = {}
    for items in gathered:
        for item in items or ():
            union.setdefault(key(item), item)
    return reason, [union[k] for k in sorted(union)]
