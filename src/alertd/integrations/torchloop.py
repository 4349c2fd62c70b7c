"""alertd for a plain PyTorch loop (or Lightning Fabric): the run's records, alertd's commands and the step guard.

    from alertd.integrations.torchloop import AlertdLoop
    with AlertdLoop(optimizer, scheduler, output_dir="out", model=model, guard=Guard(sigma=6, window=100)) as run:
        for step, batch in enumerate(loader):
            loss = model(batch).loss
            loss.backward()                      # Fabric: fabric.backward(loss)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):     # False: this update is dropped (a skip_step command, the guard)
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if run.boundary(step):               # True: stop (alertd asked; a checkpoint was saved if finite)
                break

`update()` writes the step's `train/loss` and `train/grad_norm` (pass the norm BEFORE clipping:
`clip_grad_norm_` returns it) and says whether to take the update; a dropped update has every gradient set to
None, so even an `optimizer.step()` called anyway moves nothing. `boundary()` takes alertd's commands
(`alertd.integrations.steering`: `lr_scale` at once on the optimizers and schedulers, `save`, `stop`, `skip_step`
for the next update) and the stop request (the stop file, SIGINT, SIGUSR1: `alertd.integrations.stop`). Saves
(`<output_dir>/alertd-save-step=N.pt`, `alertd-stop-step=N.pt`) are made by `save(path)` when given, else, with
`model`, as `torch.save` of the model's, optimizers' and schedulers' state dicts; only with finite weights, each
recorded in the checkpoint ledger (`framework`: torch). The files and the environment variables are the
callbacks': `<output_dir>/alertd-samples.jsonl`, `ALERTD_STOP`, `alertd-commands`. One process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from alertd.integrations import finite
from alertd.integrations.guard import Guard
from alertd.integrations.ledger import COMMAND, STOP, Ledger
from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.steering import Steering
from alertd.integrations.stop import COMMAND as STOP_COMMAND
from alertd.integrations.stop import DEFAULT_SIGNALS


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(value.detach()) if hasattr(value, "detach") else float(value)


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class AlertdLoop:
    """One plain training loop's link to alertd; a context manager (`start()` on entry, `finish()` or `crash()`
    on exit)."""

    def __init__(
        self,
        optimizers: Any,
        schedulers: Any = None,
        *,
        output_dir: str | os.PathLike[str],
        model: Any = None,
        save: Callable[[str], None] | None = None,
        samples_path: str | os.PathLike[str] | None = None,
        stop_file: str | os.PathLike[str] | None = None,
        run: str | None = None,
        signals: Iterable[str] = DEFAULT_SIGNALS,
        commands_dir: str | os.PathLike[str] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.optimizers = _listed(optimizers)
        self.schedulers = _listed(schedulers)
        self.output_dir = os.path.abspath(os.fspath(output_dir))
        self.model = model
        self.save_fn = save
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self.steering = Steering(commands_dir, guard)
        self.ledger = Ledger(self.output_dir, "torch", write=True)
        self.stopped = False

    def start(self, step: int = 0) -> None:
        """Training begins (at `step`, when resumed)."""
        self.recorder.start(self.output_dir, step)
        self.steering.start(self.output_dir, self.recorder)
        self.stopped = False

    def update(self, step: int, loss: Any = None, grad_norm: Any = None) -> bool:
        """Record the loss and the pre-clip gradient norm of update `step` (tensors or numbers); whether to take it
        (False: dropped, its gradients set to None)."""
        loss_value, norm_value = _number(loss), _number(grad_norm)
        if loss_value is not None:
            self.recorder.write(LOSS, loss_value, step)
        if norm_value is not None:
            self.recorder.write(GRAD_NORM, norm_value, step)
        if not self.steering.judging:
            return True
        why = self.steering.judge(step, loss_value, norm_value)
        if why is None:
            return True
        self.steering.skipped(step, why, self.optimizers)
        return False

    def boundary(self, step: int) -> bool:
        """After update `step`: take alertd's commands; whether to stop now (a checkpoint saved if the weights are
        finite)."""
        if self.stopped:
            return True
        done = step + 1
        orders = self.steering.boundary(done, self.optimizers, self.schedulers)
        for command in orders.stop:
            self.steering.done(command, done)
            self.recorder.stop.reason = self.recorder.stop.reason or STOP_COMMAND
        for command in orders.save:
            path, why = self._save(done, "save", COMMAND)
            if path is None:
                self.steering.refuse(command, done, why)
            else:
                self.steering.done(command, done, checkpoint=path)
        reason = self.recorder.stop_reason()
        if reason is None:
            return False
        self.stopped = True
        path, why = self._save(done, "stop", STOP)
        if path is not None:
            self.recorder.stopped(done, reason, path, saved=True)
        else:
            self.recorder.stopped(done, reason, self.ledger.last_good(), saved=False, not_saved=why)
        return True

    def finish(self, step: int | None = None) -> None:
        """Training ended normally."""
        self.recorder.finish(step if step is not None else self.recorder.last_step)

    def crash(self, exception: str, step: int | None = None) -> None:
        """Training ended by an exception of type `exception`."""
        self.recorder.crash(exception, step if step is not None else self.recorder.last_step)

    def __enter__(self) -> AlertdLoop:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
        else:
            self.crash(kind.__name__)

    def _save(self, step: int, what: str, by: str) -> tuple[str | None, str]:
        """Save `alertd-<what>-step=<step>.pt` if the weights are finite: its path, else None and why."""
        path = os.path.join(self.output_dir, f"alertd-{what}-step={step}.pt")
        if self.save_fn is None and self.model is None:
            return None, "no model and no save function given, no checkpoint saved"
        models = [self.model] if self.model is not None else []
        if not bool(finite.weights_flag(models, self.optimizers, "cpu").item()):
            self.ledger.vetoed(step, path, by)
            return None, "weights not finite, no checkpoint saved"
        if self.save_fn is not None:
            self.save_fn(path)
        else:
            import torch

            state = {
                "step": step,
                "model": self.model.state_dict(),
                "optimizers": [o.state_dict() for o in self.optimizers],
                "schedulers": [s.state_dict() for s in self.schedulers],
            }
            torch.save(state, path)
        self.ledger.saved(step, path, by)
        return path, ""


__all__ = ["AlertdLoop", "Guard"]
