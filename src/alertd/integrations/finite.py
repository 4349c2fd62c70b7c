"""Are a model's weights and its optimizer's state finite? One device sync per question.

Used by the trainer callbacks before a checkpoint enters the framework's rotated set. The tensors looked at
are every floating (or complex) tensor among the model's parameters, the optimizer's parameters and the
optimizer's state (Adam's moments, its step counts); buffers are not (some models keep -inf masks in them).
A sharded tensor (a DTensor) is looked at through its local shard: the ranks' answers are then combined by
the caller (`all_ranks_min`, or the Lightning strategy's `reduce_boolean_decision`).

torch is imported inside the functions, so that importing this module costs nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from alertd.integrations.agree import distributed

log = logging.getLogger("alertd.integrations")
_warned = False


def tensors_of(models: Iterable[Any], optimizers: Iterable[Any]) -> Iterator[Any]:
    """The parameters of `models`, those of `optimizers` (fp32 master copies, where an optimizer keeps its own), and
    every tensor (or number) in the optimizers' state; each parameter once."""
    seen: set[int] = set()
    parameters = [p for model in models if model is not None for p in model.parameters()]
    for optimizer in optimizers:
        for group in getattr(optimizer, "param_groups", None) or ():
            parameters.extend(group.get("params", ()) if isinstance(group, dict) else ())
    for parameter in parameters:
        if id(parameter) not in seen:
            seen.add(id(parameter))
            yield parameter.detach()
    for optimizer in optimizers:
        state = getattr(optimizer, "state", None)
        if not isinstance(state, Mapping):
            continue
        for per_parameter in state.values():
            yield from _leaves(per_parameter, depth=0)


def _leaves(value: Any, depth: int) -> Iterator[Any]:
    if depth > 4:
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item, depth + 1)
    else:
        yield value


def local_flag(values: Iterable[Any], device: Any) -> Any:
    """A 0-d int32 tensor on `device`: 1 if every floating tensor (and float) of `values` is finite, else 0.

    Tensors on the CPU are checked at once (no device is involved); the others per device, with one
    `isfinite(t).all()` each, stacked and combined on `device` without waiting: reading the result (`.item()`) is
    the one device sync."""
    import torch

    per_device: dict[Any, list[Any]] = {}
    cpu_ok = True
    for value in values:
        if isinstance(value, float):
            cpu_ok = cpu_ok and math.isfinite(value)
            continue
        if not isinstance(value, torch.Tensor):
            continue
        to_local = getattr(value, "to_local", None)
        tensor = to_local() if callable(to_local) else value
        if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
            continue
        if tensor.device.type == "meta":
            continue
        per_device.setdefault(tensor.device, []).append(_all_finite(tensor))
    flag = torch.ones((), dtype=torch.int32, device=device)
    for tensor_device, flags in per_device.items():
        ok = torch.stack(flags).all()
        if tensor_device.type == "cpu":
            cpu_ok = cpu_ok and bool(ok)
        else:
            flag = torch.minimum(flag, ok.to(device=device, dtype=torch.int32))
    if not cpu_ok:
        flag = torch.zeros((), dtype=torch.int32, device=device)
    return flag


def weights_flag(models: Iterable[Any], optimizers: Iterable[Any], device: Any) -> Any:
    """`local_flag(tensors_of(models, optimizers), device)`; 1 if looking fails (an optimizer of an unknown kind),
    said once in the log: a failed check never stops a save, nor stops one rank alone (whose peers would wait in
    the caller's all-reduce)."""
    import torch

    try:
        return local_flag(tensors_of(models, optimizers), device)
    except Exception as e:
        global _warned
        if not _warned:
            _warned = True
            log.warning(
                "alertd: can't check the weights (%s: %s): checkpoints are saved unchecked", type(e).__name__, e
            )
        return torch.ones((), dtype=torch.int32, device=device)


def _all_finite(tensor: Any) -> Any:
    import torch

    try:
        return torch.isfinite(tensor).all()
    except (RuntimeError, NotImplementedError):  # a dtype isfinite has no kernel for (some float8 types)
        return torch.isfinite(tensor.float()).all()


def all_ranks_min(flag: Any) -> Any:
    """`flag` (a tensor), all-reduced with MIN over the processes of torch.distributed, if it runs with several."""
    dist = distributed()
    if dist is not None:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return flag
