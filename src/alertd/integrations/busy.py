"""How long a rank was busy with its own share of a step: the figure that names a straggler in a synchronous job.

In data-parallel training (DDP) every rank waits for the slowest one in the gradient all-reduce, so the time
between two step ends (`train/step_time`) is the same on every rank, the slow one's included. What differs is
how long each rank worked before it could join: from the end of the previous step (data, forward, backward)
until its own gradients were all computed. `BusyClock` notes that last moment with a hook on every trainable
parameter (`Tensor.register_post_accumulate_grad_hook`: called once a parameter's gradient is accumulated,
before the wait for the other ranks at the end of the backward pass); the recorder writes
`train/step_busy` = that moment - the previous step end, on every rank of a distributed run.

Every trainable parameter is hooked for the first step; from its end on, only the `KEEP` parameters whose
gradients came last in it stay hooked (the backward pass visits a model in the same order each step), so the
cost is a few calls a step whatever the model's size. Where they never fire
(parameters that FSDP flattens, a model not given, a torch without the hook) no `train/step_busy` is written,
and a straggler rule on it stays silent. With CUDA the hook runs when the host queued the gradient's kernels,
not when the device finished them: a slow GPU shows once the host waits for it (as a `.item()` a step does).
torch is never imported here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("alertd.integrations")

KEEP = 8
"""The parameters that stay hooked after the first step: those whose gradients came last in it."""


class BusyClock:
    """The last moment a watched model's gradient was accumulated (0.0 before any)."""

    def __init__(self) -> None:
        self.last = 0.0
        self._handles: dict[int, Any] = {}
        self._order: list[int] | None = None  # the first step's parameters, in the order their gradients came

    def watch(self, model: Any) -> int:
        """Hook every trainable parameter of `model` (anything with `parameters()`); the number hooked."""
        self.close()
        parameters = getattr(model, "parameters", None)
        if not callable(parameters):
            return 0
        try:
            for parameter in parameters():
                register = getattr(parameter, "register_post_accumulate_grad_hook", None)
                if register is not None and getattr(parameter, "requires_grad", False):
                    self._handles.setdefault(id(parameter), register(self._mark))
        except RuntimeError as e:  # a parameter that is not a leaf, a wrapper that forbids hooks
            log.warning("alertd: can't time this rank's share of a step (train/step_busy): %s", e)
            self.close()
        self._order = []
        return len(self._handles)

    def _mark(self, parameter: Any) -> None:
        self.last = time.perf_counter()
        if self._order is not None:
            self._order.append(id(parameter))

    def settle(self) -> None:
        """A step ended: after the first one that had gradients, keep only the hooks of its `KEEP` last."""
        if not self._order:
            return
        last: list[int] = []
        for key in reversed(self._order):
            if key not in last:
                last.append(key)
                if len(last) == KEEP:
                    break
        for key in [k for k in self._handles if k not in last]:
            self._handles.pop(key).remove()
        self._order = None

    def since(self, start: float) -> float | None:
        """Seconds from `start` (a `time.perf_counter()`) to the last accumulated gradient, if one came after it."""
        return self.last - start if self.last > start else None

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self._handles.values():
            handle.remove()
        self._handles = {}
        self._order = None
        self.last = 0.0
