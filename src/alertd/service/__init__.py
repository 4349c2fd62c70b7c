"""The running service, the one composition root: what wires the sources, the engine, the dispatcher and the
notifiers together, and runs them (`alertd run`, `alertd exec`).

- `service`: `Service`, building, lifecycle, evaluate-then-submit, the delivery loop;
- `sources`: the source runner (scheduling, file-system notifications, wake-ups, time-outs, health, slices);
- `writers`: the checks of the TensorBoard writers' processes;
- `state`: the state directory (outbox, silences, alert states and cursors, committed with the plans);
- `notifiers`: the receivers built from the configuration, and the actions' reports announced;
- `engine`: the buffer, rules and their state, and how an evaluation is logged;
- `main`: `alertd run` (signals, the HTTP API); `exec`, `child`, `childtee`, `exec_stop`: `alertd exec`.
"""

from __future__ import annotations

from alertd.service.service import Service

__all__ = ["Service"]
