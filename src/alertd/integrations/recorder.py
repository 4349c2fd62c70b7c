"""What alertd's trainer callbacks share: the samples file, the stop request, the run's start and end.

Framework-free; `alertd.integrations.transformers` and `alertd.integrations.lightning` drive it from their
hooks. The run markers are those alertd's run tracking reads:

- `run.started` = 1 when training begins;
- `run.stopped` = 1 (labels `reason`: stop_file, SIGINT or SIGUSR1; `rule` when the stop file names one;
  `checkpoint`: the checkpoint saved at the stop, or when none was, the last good one; `saved`: "true" or
  "false", "false" when the weights were not finite and nothing was saved) when a stop request is honoured;
- at the end, `run.crashed` = 0 and `run.finished` = 1 (it finished), or `run.crashed` = 1 (label
  `exception`: the exception's type name) and `run.finished` = 1 (it crashed).

- while a run is recorded, alertd's `stacks` action may ask for every thread's Python stack: the signal
  SIGRTMIN+6 makes `faulthandler` write them to `<output_dir>/alertd-stacks.rank<N>.txt`
  (`alertd-stacks.txt` in a one-process run), even while the main thread waits in a collective
  (`alertd.integrations.stacks`);
- `train/step_time` at every step end: the seconds since the previous step end (the first: since the start),
  from a monotonic clock; on every rank, it is each rank's heartbeat too (one line a step, about 10 µs);
- `train/step_busy` at every step end of a distributed run whose model the callback was given (`watch`): the
  seconds this rank worked on the step before it waited for the others (`alertd.integrations.busy`); the
  straggler's figure, as the step time is alike on every rank of a synchronous job.

Every rank of a distributed run records (the callbacks run on every process): its samples carry the labels
`rank`, `local_rank`, `world_size` and `node` where known (`alertd.integrations.ranks`; none in a one-process
run), and all ranks append to the one samples file, line by line (`alertd.integrations.samples_writer`; a path
holding `{rank}` gives a file per rank). alertd's run tracking takes them as members of one run (`ranks` in
`GET /api/v1/runs`). The checkpoint ledger, `$ALERTD_RUN_INFO` and the recovery plan's acknowledgement are
written by global rank 0 only.

A run that began and has not ended when the interpreter exits (an exception no hook saw, `sys.exit` in
the middle of training) is recorded as crashed by an `atexit` handler, with the type of the exception
that ended the program where Python kept it (`sys.last_exc`, `sys.last_type`), else "unknown". A process
killed outright (SIGKILL, the OOM killer) writes nothing: alertd's absence and stall rules are for that.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Iterable

from alertd.integrations.busy import BusyClock
from alertd.integrations.ranks import rank_labels, rank_path
from alertd.integrations.samples_writer import (
    DEFAULT_SAMPLES_NAME,
    RUN_ENV,
    SAMPLES_FILE_ENV,
    SamplesWriter,
    run_labels,
)
from alertd.integrations.stacks import StacksHook
from alertd.integrations.stop import DEFAULT_SIGNALS, DEFAULT_STOP_NAME, STOP_FILE, STOP_FILE_ENV, StopRequest

log = logging.getLogger("alertd.integrations")

LOSS = "train/loss"
GRAD_NORM = "train/grad_norm"
STARTED = "run.started"
FINISHED = "run.finished"
CRASHED = "run.crashed"
STOPPED = "run.stopped"
STEP_TIME = "train/step_time"
STEP_BUSY = "train/step_busy"


def resolve(explicit: str | os.PathLike[str] | None, env: str, default: str) -> str:
    """The constructor's value, else the environment variable's, else the default."""
    if explicit is not None and os.fspath(explicit):
        return os.fspath(explicit)
    return os.environ.get(env) or default


class RunRecorder:
    """One training run's records, from `start()` to `finish()` or `crash()`."""

    def __init__(
        self,
        samples_path: str | os.PathLike[str] | None,
        stop_file: str | os.PathLike[str] | None,
        run: str | None,
        signals: Iterable[str] = DEFAULT_SIGNALS,
    ) -> None:
        self.samples_path_arg = samples_path
        self.stop_file_arg = stop_file
        self.run_arg = run
        self.signals = tuple(signals)
        self.writer: SamplesWriter | None = None
        self.stop = StopRequest(None, ())
        self.active = False
        self.last_step: int | None = None
        self.ranks: dict[str, str] = {}
        """This process's rank labels (`alertd.integrations.ranks`), from `start()`; {} in a one-process run."""
        self._atexit = False
        self._step_end = 0.0
        self.stacks = StacksHook()
        """Every thread's stack to `<output_dir>/alertd-stacks[.rank<N>].txt` on alertd's signal
        (`alertd.integrations.stacks`)."""
        self.busy = BusyClock()
        """When this rank's gradients were last all computed (`watch`)."""

    def start(self, base_dir: str | os.PathLike[str], step: int) -> None:
        """Training begins in `base_dir` (the output directory): open the samples file, listen for a stop."""
        if self.active:  # the last run in this process never said how it ended
            self.crash("unknown", self.last_step)
        base = os.path.abspath(os.fspath(base_dir))
        run = self.run_arg or os.environ.get(RUN_ENV) or os.path.basename(base) or "run"
        self.ranks = rank_labels()
        samples = resolve(self.samples_path_arg, SAMPLES_FILE_ENV, os.path.join(base, DEFAULT_SAMPLES_NAME))
        samples = rank_path(samples, self.ranks.get("rank"))
        stop_file = resolve(self.stop_file_arg, STOP_FILE_ENV, os.path.join(base, DEFAULT_STOP_NAME))
        self.writer = SamplesWriter(samples, run_labels(run) | self.ranks)
        try:  # alertd's stop_file notifier never creates directories; HF makes output_dir only when it saves
            os.makedirs(os.path.dirname(os.path.abspath(stop_file)), exist_ok=True)
        except OSError as e:
            log.warning("alertd: can't create the directory of the stop file %s: %s", stop_file, e)
        self.stop = StopRequest(stop_file, self.signals)
        self.stop.install()
        self.stacks.install(base, self.ranks.get("rank"))
        self.active = True
        self.last_step = step
        if not self._atexit:
            atexit.register(self._at_exit)
            self._atexit = True
        self.write(STARTED, 1.0, step)
        self._step_end = time.perf_counter()
        log.info("alertd: recording run %r to %s; stop file %s", run, samples, stop_file)

    def write(self, metric: str, value: float, step: int | None, labels: dict[str, str] | None = None) -> None:
        """One sample, if a run is being recorded."""
        if self.writer is not None:
            self.writer.write(metric, value, step, labels)
        if step is not None:
            self.last_step = step

    def watch(self, model: object) -> None:
        """Time this rank's share of each step (`train/step_busy`) from `model`'s gradients, in a distributed run
        (in one process there are no peers to compare it with)."""
        if self.ranks and self.active:
            self.busy.watch(model)

    def step_end(self, step: int) -> None:
        """Step `step` ended: `train/step_time`, the seconds since the last step end (or the start), the rank's
        heartbeat; `train/step_busy`, the part of it before the rank's gradients were all computed (`watch`)."""
        now = time.perf_counter()
        start, self._step_end = self._step_end, now
        if self.writer is not None:
            self.writer.write(STEP_TIME, now - start, step)
            busy = self.busy.since(start)
            if busy is not None:
                self.writer.write(STEP_BUSY, busy, step)
                self.busy.settle()

    def stop_reason(self) -> str | None:
        """The reason of a pending stop request (looks for the stop file), or None."""
        return self.stop.poll() if self.active else None

    def stopped(
        self, step: int, reason: str, checkpoint: str | None, saved: bool | None = None, not_saved: str = ""
    ) -> None:
        """A stop request is honoured at `step`: say why, and which checkpoint, in the log and as `run.stopped`.

        `saved`: True when `checkpoint` was saved at the stop; False when nothing was (`not_saved` says what
        happened, e.g. "weights not finite, no checkpoint saved"; `checkpoint` is then the last good one, or None);
        None when it is not known."""
        labels = {"reason": reason}
        if reason == STOP_FILE and isinstance(rule := self.stop.file_body().get("rule"), str) and rule:
            labels["rule"] = rule
        if checkpoint:
            labels["checkpoint"] = checkpoint
        if saved is not None:
            labels["saved"] = "true" if saved else "false"
        why = self.stop.describe() if self.stop.reason == reason else f"a stop request on another rank ({reason})"
        if saved is False:
            last = f"the last good checkpoint is {checkpoint}" if checkpoint else "no good checkpoint is known"
            where = f"{not_saved or 'no checkpoint saved'}; {last}"
        else:
            where = f"checkpoint: {checkpoint}" if checkpoint else "no checkpoint"
        log.warning("alertd: stopping at step %d, asked by %s; %s", step, why, where)
        self.write(STOPPED, 1.0, step, labels)
        self.stop.consume()

    def finish(self, step: int | None) -> None:
        """Training ended normally."""
        if self.active:
            self.write(CRASHED, 0.0, step)
            self.write(FINISHED, 1.0, step)
        self._close()

    def crash(self, exception: str, step: int | None) -> None:
        """Training ended by an exception of type `exception`."""
        if self.active:
            self.write(CRASHED, 1.0, step, {"exception": exception})
            self.write(FINISHED, 1.0, step)
        self._close()

    def _close(self) -> None:
        self.active = False
        self.stop.uninstall()
        self.stacks.uninstall()
        self.busy.close()
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _at_exit(self) -> None:
        if self.active:
            self.crash(exception_name(), self.last_step)


def exception_name() -> str:
    """The type name of the exception that ended the program, where Python kept it; else "unknown"."""
    exc = getattr(sys, "last_exc", None)
    if exc is not None:
        return type(exc).__name__
    kind = getattr(sys, "last_type", None)
    return kind.__name__ if isinstance(kind, type) else "unknown"
