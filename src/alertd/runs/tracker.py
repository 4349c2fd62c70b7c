"""Runs as first-class: what state each training run is in, from its samples and its writer. Pure.

A run is (source, `run` label). Its state is `running`, `stalled` (no new sample for `stall_after`
while its writer lives or is unknown) or `ended` with a reason:

- `finished`: a clean end, on evidence only: W&B's or MLflow's finished state, an exit record or exit
  status 0 (of alertd's own child, or of a writer seen as a zombie with its status), HF Trainer's
  end-of-training summary (`train_runtime`), the training callbacks' end record;
- `crashed`: a non-zero exit code, W&B's crashed/failed state, MLflow's FAILED, a fatal log line (a
  traceback, CUDA out of memory: an exit status 0 after it does not make the run `finished`);
- `killed`: ended by a signal (an exit status -N), or after alertd asked it to stop (`run.stopped`);
- `lost`: the verified writer on this host vanished while it still held its files and nothing says
  how; in a replay, a run that announced its start (`run.started`: W&B files, alertd's callbacks) and
  whose data ends with no end marker.

Under alertd exec with a `recover` notifier, a run stopped to be started again from a checkpoint is
`recovering` (in `GET /api/v1/runs`; `recovery` says its attempt and plan) until the next attempt starts.

A run whose writer process is gone with nothing saying how (it closed its files and exited, or it was
only ever known from a file name: torch's `SummaryWriter` holds no file open) ended for an unknown
reason (`reason` label `unknown`): it is then neither stalled nor said to be done. A process that exited
is not alive even while it waits to be reaped (a zombie); where its exit status can still be read, that
status tells how it ended. `alertd exec` and the training callbacks say how a run ended.

A run ends once per episode: when later evidence tells better (a non-zero exit code after a `finished`
record), the earlier `run.end` series is set back to 0 as the new one is set to 1, so one end never
fires both `run_finished` and `run_crashed`. A run that starts again after its end (a relaunch under the
same name, a resumed run) sets its `run.end` and `run.finished` back to 0: its earlier end's alerts
resolve, and its new data is a new incident.

What sources say, as samples with the run's `source` and `run` labels: `run.started` = 1,
`run.finished` = 1 (it ended; `run.crashed` beside it tells how), `run.crashed` = 0/1,
`run.exit_code` = N, `run.stopped` = 1, and HF's `train_runtime`. A sample after the end (more than `LATE`,
2 s, after it) starts the run again (a resumed run writes on).

What rules see (derived samples, appended beside the sources' own):
- `run.stalled` = 1 at the instant a run stalls (its last sample's time + `stall_after`), 0 when it
  moves again or ends. In a replay there is no live process: a run whose data simply stops is not
  stalled, a gap longer than `stall_after` inside the data is (the clock is the samples' own).
- `run.hung` with `run.stalled`, for a run of two ranks or more: every rank silent (a collective that hangs);
- `run.end{reason=...}` = 1 once when a run ends (label `exit_code` where known), and `run.finished`
  = 1 when no source said so, so `absent` conditions know the run is over.

Ranks: the processes of a distributed run write under the one run (the key stays (source, `run`)); a
sample's `rank` label makes its rank a member of the run (`Run.ranks`, at most `MAX_RANKS`): its last step,
last time and state, `running`, `stalled` (the run stalled, or the rank's last sample is `stall_after` older
than the run's: one rank silent while the others go on) or `ended` (the run ended, or the rank wrote its own
`run.finished`). Rank 0 (and samples with no `rank`) speak for the run; another rank's markers
(`run.started`, `run.finished`, `run.crashed`...) end or start only that rank, and its samples after the
run's end (its last steps, written a moment after rank 0's end marker) do not start the run again. The
rules still see every rank's samples, `run.crashed{rank="3"}` included. The first rank whose crash the data
showed (its `run.crashed`), or the one alertd exec names when its launcher exits (torchrun's "first observed
failure"), is the run's failed rank (`Run.failed_rank`): the `rank` label of its `run.end` where known before the
run ended. alertd exec tells the pid of each rank it finds among its child's processes (`rank_pids`).

Time is always an argument; nothing here reads a clock, a file or /proc.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from alertd._np import np
from alertd.columns import Columns
from alertd.model import Labels, Sample, SeriesKey, make_labels

STALLED = "run.stalled"
HUNG = "run.hung"
"""`run.stalled` of a run of two ranks or more: every rank silent while the processes may live (a collective
that hangs); 1 and 0 with `run.stalled`."""
END = "run.end"
FINISHED = "run.finished"
CRASHED = "run.crashed"
STARTED = "run.started"
EXIT_CODE = "run.exit_code"
STOPPED = "run.stopped"
HF_SUMMARY = "train_runtime"
"""HF Trainer logs it once, with the end-of-training summary, at the last step (`train/train_runtime` in
TensorBoard and W&B, `train_runtime` in its printed dict and in MLflow)."""
MARKERS = frozenset({STARTED, FINISHED, CRASHED, EXIT_CODE, STOPPED})
DERIVED = frozenset({STALLED, HUNG, END})
LOG_EVENT = "log.event"
"""A text log's event (a traceback, CUDA out of memory): after the end it is that end said again (torchrun's own
traceback after its rank's), never a new episode."""
_NOT_PROGRESS = MARKERS | {LOG_EVENT}
LATE = 2.0
"""Seconds after a run's end in which its samples do not start it again: the last lines of the episode that
ended (a crash seen in one output stream before the other stream's last steps, a rank's line read after the
traceback of the rank that failed), not a relaunch."""
MAX_RUNS = 10_000
MAX_RANKS = 1024
"""Ranks tracked per run at most; the samples of further ranks still count for the run."""
MAX_ACTIONS = 20
"""Action reports kept per run (`Run.actions`), the newest."""
"""Runs tracked at most; the oldest ended ones are forgotten first."""
_FAST_MIN = 32
"""Samples in one `observe` from which it tries the column-wise path (`_observe_progress`)."""
_SKIP = 0
"""A series `observe` passes over (no `source` or `run` label, or a derived series)."""
_OTHER = 1
"""A series whose samples can change a run's state (markers, HF's summary): sample by sample only."""
_KINDS_MAX = 65_536
"""Key objects whose kind `observe` remembers (the memo is cleared beyond)."""


class RunState(enum.Enum):
    """Where a run stands."""

    RUNNING = "running"
    STALLED = "stalled"
    ENDED = "ended"


RECOVERING = "recovering"
"""The state `GET /api/v1/runs` gives an ended run that alertd exec is about to start again (`recover`)."""


class EndReason(enum.Enum):
    """How a run ended."""

    FINISHED = "finished"
    CRASHED = "crashed"
    KILLED = "killed"
    LOST = "lost"


@dataclass(slots=True)
class Writer:
    """The process writing a run, as the service saw it (None: not known)."""

    host: str
    pid: int
    verified: bool
    alive: bool
    holding: bool
    exit_status: int | None = None
    """Once it is gone: its status as subprocess's returncode (-N: signal N), where it could be read (a
    zombie's); else None."""
    how: str = ""
    """How a verified writer was verified: `holds` (seen holding the file open for writing) or `owner` (its
    uid owns the file, and it started before the file was created); "" when not verified."""


@dataclass(slots=True)
class RankState:
    """One rank of a run (a `rank` label's value), as its samples show it."""

    last_step: int | None = None
    last_time: float = -math.inf
    ended_at: float | None = None
    """When it wrote its own end (`run.finished`); None while it has not."""
    pid: int | None = None
    """Its process, where alertd exec found it among its child's processes (`RunTracker.rank_pids`)."""

    def seen(self, step: int | None, t: float) -> None:
        """A progress sample of the rank."""
        if step is not None:
            self.last_step = step if self.last_step is None else max(self.last_step, step)
        self.last_time = max(self.last_time, t)
        if self.ended_at is not None and t > self.ended_at:
            self.ended_at = None  # it writes again after its end


@dataclass(slots=True)
class Run:
    """One run and what is known of it."""

    source: str
    run: str
    state: RunState = RunState.RUNNING
    reason: EndReason | None = None
    exit_code: int | None = None
    started: bool = False
    stop_requested: bool = False
    live: bool = False
    first_step: int | None = None
    last_step: int | None = None
    first_time: float = math.inf
    last_time: float = -math.inf
    ended_at: float | None = None
    writer: Writer | None = None
    recovery: dict[str, object] | None = None
    """alertd exec's recovery of it: `attempt` (the attempt running or planned), `plan` (in words),
    `recovering` (stopped, to start again as the plan says)."""
    actions: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=MAX_ACTIONS))
    """What the actions did about it (`action_entry`: a kill, a stop file, an LR cut and the trainer's
    acknowledgement, a recovery...), oldest first, the newest `MAX_ACTIONS`."""
    hung: bool = False
    """`run.hung` = 1 was said for its stall (it has ranks): said 0 when the stall ends."""
    ranks: dict[str, RankState] = field(default_factory=dict)
    """Its ranks (`rank` label values) in a distributed run, at most `MAX_RANKS`; empty for one process."""
    failed_rank: str | None = None
    """The first rank that failed (its crash in the data, or torchrun's first observed failure); None: not known."""
    stall_after: float = field(default=600.0, repr=False)
    _crashed: bool = field(default=False, repr=False)
    _end_rank: str | None = field(default=None, repr=False)
    """The `rank` label of its last `run.end` = 1 (so that its retraction names the same series)."""

    def rank(self, rank: str) -> RankState | None:
        """The state of `rank`, made on its first sample; None past `MAX_RANKS` ranks."""
        r = self.ranks.get(rank)
        if r is None and len(self.ranks) < MAX_RANKS:
            r = self.ranks[rank] = RankState()
        return r

    def rank_state(self, r: RankState) -> str:
        """`running`, `stalled` (the run stalled, or the rank is `stall_after` behind the run's last sample) or
        `ended` (the run ended, or the rank wrote its end)."""
        if self.state is RunState.ENDED or r.ended_at is not None:
            return RunState.ENDED.value
        if self.state is RunState.STALLED or self.last_time - r.last_time >= self.stall_after:
            return RunState.STALLED.value
        return RunState.RUNNING.value

    def ranks_json(self) -> dict[str, dict[str, object]]:
        """Per rank (in rank order): its last step, last time and state."""
        order = sorted(self.ranks, key=lambda k: (len(k), k))
        return {
            k: {
                "last_step": (r := self.ranks[k]).last_step,
                "last_time": r.last_time if math.isfinite(r.last_time) else None,
                "state": self.rank_state(r),
                "pid": r.pid,
            }
            for k in order
        }

    @property
    def recovering(self) -> bool:
        """Ended, to be started again by a recovery (`recover` under alertd exec): the run's state `recovering`."""
        return self.state is RunState.ENDED and self.recovery is not None and bool(self.recovery.get("recovering"))

    @property
    def labels(self) -> Labels:
        """The labels of this run's derived series."""
        return make_labels({"source": self.source, "run": self.run})

    def as_json(self) -> dict[str, object]:
        """For `GET /api/v1/runs`."""
        w = self.writer
        return {
            "source": self.source,
            "run": self.run,
            "state": RECOVERING if self.recovering else self.state.value,
            "reason": self.reason.value if self.reason else ("unknown" if self.state is RunState.ENDED else None),
            "recovery": self.recovery,
            "exit_code": self.exit_code,
            "failed_rank": self.failed_rank,
            "writer": None
            if w is None
            else {
                "host": w.host,
                "pid": w.pid,
                "verified": w.verified,
                "verifiedBy": w.how or None,
                "alive": w.alive,
                "holding": w.holding,
            },
            "first_step": self.first_step,
            "last_step": self.last_step,
            "first_time": self.first_time if math.isfinite(self.first_time) else None,
            "last_time": self.last_time if math.isfinite(self.last_time) else None,
            "ended_at": self.ended_at,
            "actions": list(self.actions),
            "ranks": self.ranks_json(),
        }


def action_entry(report: Any, now: float) -> dict[str, object]:
    """An action's report (`alertd.dispatch.announce.ActionReport`) as a run shows it: action, notifier, rule,
    refused, summary, time (epoch seconds, `now`), and the report's own fields where it has `as_json()` (the
    trainer's acknowledgement: step, old and new LR, checkpoint; a recovery's attempt and plan)."""
    entry: dict[str, object] = {
        "action": str(report.action),
        "notifier": str(report.notifier),
        "rule": str(report.rule),
        "refused": report.refused,
        "summary": str(report.summary()),
        "time": now,
    }
    own = getattr(report, "as_json", None)
    if callable(own):
        body = own()
        if isinstance(body, dict):
            entry |= {str(k): v for k, v in body.items() if k not in entry}
    return entry


class RunTracker:
    """Every run's state, fed with samples and writer news; returns the derived samples to buffer."""

    def __init__(self, stall_after: float = 600.0) -> None:
        self.stall_after = stall_after
        self.runs: dict[tuple[str, str], Run] = {}
        self._next_tick = -math.inf
        """No run can stall before this time: `tick` looks at the runs only from then on."""
        self._tick_stall = stall_after
        self._kinds: dict[int, tuple[SeriesKey, int | tuple[str, str, str | None]]] = {}
        """id(key) -> (key, its kind: _SKIP, _OTHER or its run); holding the key keeps its id unique."""

    # inputs

    def observe(
        self, samples: Iterable[Sample], now: float | None = None, columns: Columns | None = None
    ) -> list[Sample]:
        """Take in samples (in time order per run); return the derived samples they cause.

        `now` (the service's clock): a run is live, and can stall on the tick, once one of its samples is
        younger than `stall_after` when it arrives; history read at start-up never stalls. A replay gives the
        samples' `columns` too (`alertd.columns`: the same samples, row for row).
        """
        batch = samples if type(samples) is list else list(samples)
        if len(batch) >= _FAST_MIN and self._observe_progress(batch, now, columns):
            return []
        out: list[Sample] = []
        crashing = {
            (s.series.label("source"), s.series.label("run"))
            for s in batch
            if s.series.metric == CRASHED and s.value > 0
        }
        for s in batch:
            source, name = s.series.label("source"), s.series.label("run")
            metric = s.series.metric
            if source is None or name is None or metric in DERIVED:
                continue
            run = self._run(source, name)
            t = s.time
            rank = s.series.label("rank")
            if rank is not None and metric == CRASHED and s.value > 0 and run.state is not RunState.ENDED:
                run.failed_rank = run.failed_rank or rank  # the first rank whose crash the data shows
            if rank is not None and self._member(run, rank, metric, s.step, s.value, t):
                continue
            if run.state is RunState.ENDED and metric not in _NOT_PROGRESS and t > (run.ended_at or -math.inf) + LATE:
                self._restart(run, t, out)
            if metric in MARKERS:
                run._crashed = run._crashed or (source, name) in crashing
                self._marker(run, metric, s.value, t, out)
            else:
                self._progress(run, s.step, t, out)
                if now is not None and now - t < self.stall_after:
                    run.live = True
                if run.live and run.state is RunState.RUNNING:
                    self._next_tick = min(self._next_tick, run.last_time + self.stall_after)
                if (metric == HF_SUMMARY or metric.endswith("/" + HF_SUMMARY)) and run.state is not RunState.ENDED:
                    self._end(run, EndReason.FINISHED, t, out, say_finished=True)
        return out

    def _member(self, run: Run, rank: str, metric: str, step: int | None, value: float, t: float) -> bool:
        """A sample of `rank` of `run`: moves the rank; True when it stops there (another rank's marker, or its
        sample after the run's end)."""
        r = run.rank(rank)
        marker = metric in MARKERS
        if r is not None:
            if not marker:
                r.seen(step, t)
            elif metric == FINISHED and value > 0:
                r.ended_at = t
                r.last_time = max(r.last_time, t)
            elif metric == STARTED:
                r.ended_at = None
                r.last_time = max(r.last_time, t)
        if rank == "0":
            return False
        return marker or run.state is RunState.ENDED

    def writer_of(self, source: str, run: str) -> Writer | None:
        """What the run was last told of its writer (`writer`), None when nothing (or the run is not known)."""
        r = self.runs.get((source, run))
        return r.writer if r is not None else None

    def writer(self, source: str, run: str, writer: Writer, now: float) -> list[Sample]:
        """News of a run's writer process (verified, alive, holding its files); may end the run."""
        r = self._run(source, run)
        before = r.writer
        r.writer = writer
        if before is None or before.alive != writer.alive:
            self._next_tick = -math.inf  # a run skipped for its dead writer may stall now
        out: list[Sample] = []
        if r.state is RunState.ENDED or writer.alive:
            return out
        if writer.exit_status is not None:  # the process is gone, and its status says how
            return self.exited(source, run, writer.exit_status, now)
        if writer.verified and (before is None or not before.alive):
            return out  # seen gone already (or never seen alive): said when it went
        # The process is gone and nothing says how the run ended: a writer that still held its files
        # vanished (lost), one that closed them (or was never seen holding them: torch's writer opens its
        # file only to write) ended for an unknown reason. Never "finished" on this alone.
        reason: EndReason | None = None
        if writer.verified and before is not None and before.holding:
            reason = EndReason.LOST
        if r.stop_requested:
            reason = EndReason.KILLED
        self._end(r, reason, now, out, say_finished=True)
        return out

    def exited(self, source: str, run: str, status: int, now: float, rank: str | None = None) -> list[Sample]:
        """The run's process (alertd's own child) exited: `status` as subprocess's returncode; `rank`: the rank its
        launcher says failed first (kept where the data named none; the `rank` of a `run.end` said now)."""
        r = self._run(source, run)
        out: list[Sample] = []
        if rank is not None and status != 0 and r.failed_rank is None:
            r.failed_rank = rank
        reason = EndReason.FINISHED if status == 0 else (EndReason.KILLED if status < 0 else EndReason.CRASHED)
        if r.stop_requested and status != 0 and reason is not EndReason.KILLED:
            reason = EndReason.KILLED
        if r.state is RunState.ENDED:
            if r.reason in (EndReason.CRASHED, EndReason.KILLED) or r.reason is reason:
                # A crash the data showed (a traceback, CUDA out of memory) stays a crash whatever the
                # status; the same end said again is not a new one.
                if r.exit_code is None:
                    r.exit_code = status
                return out
            self._retract(r, now, out)  # the data said finished, unknown or lost: the status says better
        r.exit_code = status
        self._end(r, reason, now, out, say_finished=r.state is not RunState.ENDED)
        return out

    def rank_pids(self, source: str, run: str, pids: dict[str, int], now: float) -> None:
        """alertd exec found the processes of the run's ranks (rank -> pid) at `now`: each a member of the run."""
        r = self._run(source, run)
        for rank, pid in pids.items():
            member = r.rank(rank)
            if member is not None:
                member.pid = pid

    def acted(self, source: str, run: str, entry: dict[str, object]) -> None:
        """An action's report about the run (`action_entry`), kept with the newest `MAX_ACTIONS`."""
        self._run(source, run).actions.append(entry)

    def recovering(self, source: str, run: str, attempt: int, plan: str) -> None:
        """alertd exec stopped the run to start it again as `plan` says, as attempt `attempt`: `recovering` until
        then (it has ended: `exited` first)."""
        self._run(source, run).recovery = {"attempt": attempt, "plan": plan, "recovering": True}

    def started_again(self, source: str, run: str, now: float) -> list[Sample]:
        """The run's process is started again (alertd exec's restart): a new episode, as when an ended run writes
        again, even before it writes. Nothing when it has not ended."""
        r = self._run(source, run)
        out: list[Sample] = []
        if r.state is RunState.ENDED:
            self._restart(r, now, out)
        return out

    def ended_unseen(self, source: str, run: str, now: float) -> list[Sample]:
        """The run's last episode ended while no one watched (alertd was not running): ended now, reason
        unknown. Nothing when it is known ended."""
        r = self._run(source, run)
        out: list[Sample] = []
        if r.state is not RunState.ENDED:
            self._end(r, None, now, out, say_finished=True)
        return out

    def tick(self, now: float) -> list[Sample]:
        """Runs that stalled by `now` (their writer alive or unknown): their `run.stalled` = 1.

        Looks at every run only when one can have stalled (the cost of an idle tick does not grow with
        the number of runs)."""
        out: list[Sample] = []
        if now < self._next_tick and self.stall_after == self._tick_stall:
            return out
        next_tick = math.inf
        for r in self.runs.values():
            if not r.live or r.state is not RunState.RUNNING:
                continue
            if now - r.last_time >= self.stall_after:
                if r.writer is not None and not r.writer.alive:
                    continue  # no writer: `writer()` decides how it ended
                r.state = RunState.STALLED
                self._stalled(r, r.last_time + self.stall_after, r.last_step, 1.0, out)
            else:
                next_tick = min(next_tick, r.last_time + self.stall_after)
        self._next_tick, self._tick_stall = next_tick, self.stall_after
        return out

    def end_of_replay(self) -> list[Sample]:
        """A replay reached the end of its data: runs that announced their start and never ended are lost."""
        out: list[Sample] = []
        for r in self.runs.values():
            if r.started and r.state is not RunState.ENDED and math.isfinite(r.last_time):
                self._end(r, EndReason.LOST, r.last_time, out, say_finished=True)
        return out

    def all(self) -> list[Run]:
        """Every run, most recently active first."""
        return sorted(self.runs.values(), key=lambda r: -r.last_time)

    # internals

    def _observe_progress(self, batch: list[Sample], now: float | None, columns: Columns | None = None) -> bool:
        """`observe` column-wise, for a batch of plain progress samples only: True when done (it derives
        nothing then), False (and nothing changed) where it must go sample by sample.

        It applies where every sample is a progress sample (no marker, no HF summary; samples `observe`
        passes over may be there) of a run that is running (or new), all times finite and no gap over
        `stall_after` in any run: then each sample only moves its run's first/last step and time, and
        liveness, exactly as `_progress` and the live check of the loop do, one sample after the other.
        """
        cols = Columns.of(batch) if columns is None else columns
        if cols is None:
            return False
        times = cols.times
        if not bool(np.isfinite(times).all()):
            return False
        first_seen, place = cols.groups()
        sorted_out = self._slots(first_seen)
        if sorted_out is None:
            return False
        slots, order, skipped = sorted_out
        if not order:
            return True
        runs = [self.runs.get(k[:2]) for k in order]
        if any(r is not None and r.state is not RunState.RUNNING for r in runs):
            return False
        if len(self.runs) + sum(r is None for r in runs) >= MAX_RUNS:
            return False
        if len(order) == 1 and not skipped:
            picks: list[Any] = [None]
        else:
            labels = np.asarray(slots, dtype=np.intp)[place]  # several key objects (one: a single run, above)
            picks = [np.flatnonzero(labels == slot) for slot in range(len(order))]
        plans = []
        for run, rows in zip(runs, picks, strict=True):
            plan = self._gapless(run, times if rows is None else times[rows])
            if plan is None:
                return False
            plans.append(plan)
        steps = cols.steps if cols.steps is not None else [s.step for s in batch]
        for (source, name, rank), run, rows, plan in zip(order, runs, picks, plans, strict=True):
            self._advance(run or self._run(source, name), rows, steps, plan, now, rank)
        return True

    def _slots(
        self, first_seen: dict[int, SeriesKey]
    ) -> tuple[list[int], list[tuple[str, str, str | None]], bool] | None:
        """Each key object's run slot (-1: passed over; in the order of `first_seen`: key objects by id, in batch
        order), the runs in batch order, whether any key was passed over; None when a key's samples can change a
        run's state (markers: sample by sample)."""
        kinds = self._kinds
        if len(kinds) > _KINDS_MAX:
            kinds.clear()
        slots: list[int] = []
        order: list[tuple[str, str, str | None]] = []
        index: dict[tuple[str, str, str | None], int] = {}
        skipped = False
        for ident, key in first_seen.items():
            hit = kinds.get(ident)
            if hit is None:
                hit = kinds[ident] = (key, _kind(key))
            kind = hit[1]
            if kind == _OTHER:
                return None
            if kind == _SKIP:
                slots.append(-1)
                skipped = True
                continue
            assert isinstance(kind, tuple)
            slot = index.get(kind)
            if slot is None:
                slot = index[kind] = len(order)
                order.append(kind)
            slots.append(slot)
        return slots, order, skipped

    def _gapless(self, run: Run | None, t: Any) -> tuple[Any, float, Any] | None:
        """(its times, its last time before, their running maximum) for a run's samples of a batch, or None
        where a gap over `stall_after` lies before or inside them (the run stalled: sample by sample)."""
        stall = self.stall_after
        prev = -math.inf if run is None else run.last_time
        highs = np.maximum.accumulate(t)
        if math.isfinite(prev) and t[0] - prev > stall:
            return None
        if len(t) > 1 and bool((t[1:] - np.maximum(highs[:-1], prev) > stall).any()):
            return None
        return t, prev, highs

    def _advance(
        self,
        run: Run,
        rows: Any,
        step_col: Any,
        plan: tuple[Any, float, Any],
        now: float | None,
        rank: str | None = None,
    ) -> None:
        """Move a run's first/last step and time and its liveness over its samples of a batch (`rows`; None: all),
        and those of `rank` where they are a rank's. `step_col`: the batch's steps, an int64 array (`Columns`,
        every step an int) or a list (None where a sample has none)."""
        t, prev, highs = plan
        low: int | None = None
        high: int | None = None
        if isinstance(step_col, np.ndarray):
            mine = step_col if rows is None else step_col[rows]
            if len(mine):
                low, high = int(mine.min()), int(mine.max())
        else:
            steps = step_col if rows is None else [step_col[i] for i in rows.tolist()]
            if None in steps:
                steps = [x for x in steps if x is not None]
            if steps:
                low, high = min(steps), max(steps)
        if low is not None and high is not None:
            run.first_step = low if run.first_step is None else min(run.first_step, low)
            run.last_step = high if run.last_step is None else max(run.last_step, high)
        newest = float(t.max())  # finite times (`_observe_progress`)
        run.first_time = min(run.first_time, float(t.min()))
        run.last_time = max(run.last_time, newest)
        if rank is not None and (member := run.rank(rank)) is not None:
            member.seen(high, newest)
        first_live = 0 if run.live else -1
        if now is not None and first_live < 0:
            young = np.flatnonzero(now - t < self.stall_after)
            if len(young):
                run.live, first_live = True, int(young[0])
        if first_live >= 0:
            self._next_tick = min(self._next_tick, max(prev, float(highs[first_live])) + self.stall_after)

    def _run(self, source: str, name: str) -> Run:
        key = (source, name)
        r = self.runs.get(key)
        if r is None:
            if len(self.runs) >= MAX_RUNS:
                self._forget()
            r = self.runs[key] = Run(source, name)
        r.stall_after = self.stall_after
        return r

    def _forget(self) -> None:
        ended = sorted((r.last_time, k) for k, r in self.runs.items() if r.state is RunState.ENDED)
        victims = [k for _, k in ended[: max(1, len(self.runs) // 10)]] or [next(iter(self.runs))]
        for k in victims:
            del self.runs[k]

    def _progress(self, run: Run, step: int | None, t: float, out: list[Sample]) -> None:
        if run.state is RunState.STALLED or (
            run.state is RunState.RUNNING and t - run.last_time > self.stall_after and math.isfinite(run.last_time)
        ):
            if run.state is RunState.RUNNING:  # a gap inside the data: it stalled, and moves again now
                self._stalled(run, run.last_time + self.stall_after, run.last_step, 1.0, out)
            self._stalled(run, max(t, run.last_time + self.stall_after), step, 0.0, out)
            run.state = RunState.RUNNING
        if step is not None:
            run.first_step = step if run.first_step is None else min(run.first_step, step)
            run.last_step = step if run.last_step is None else max(run.last_step, step)
        run.first_time = min(run.first_time, t)
        run.last_time = max(run.last_time, t)

    def _marker(self, run: Run, metric: str, value: float, t: float, out: list[Sample]) -> None:
        run.first_time = min(run.first_time, t)
        run.last_time = max(run.last_time, t)
        if metric == STARTED:
            run.started = True
        elif metric == STOPPED and value > 0:
            run.stop_requested = True
        elif metric == EXIT_CODE and math.isfinite(value):
            if run.state is RunState.ENDED and int(value) != 0 and run.reason is EndReason.FINISHED:
                self._retract(run, t, out)  # the code came after the finish marker
                run.exit_code = int(value)
                run.reason = EndReason.CRASHED
                out.append(self._end_sample(run, t))
            else:
                run.exit_code = int(value)
        elif metric == CRASHED:
            run._crashed = value > 0
            if run.state is RunState.ENDED:
                if value > 0 and run.reason is EndReason.FINISHED:  # `run.finished` came first
                    self._retract(run, t, out)
                    run.reason = EndReason.CRASHED
                    out.append(self._end_sample(run, t))
            elif value > 0:
                self._end(run, EndReason.CRASHED, t, out, say_finished=False)
        elif metric == FINISHED and value > 0 and run.state is not RunState.ENDED:
            failed = run._crashed or (run.exit_code is not None and run.exit_code != 0)
            reason = EndReason.CRASHED if failed else EndReason.FINISHED
            if run.stop_requested:
                reason = EndReason.KILLED
            self._end(run, reason, t, out, say_finished=False)

    def _end(self, run: Run, reason: EndReason | None, t: float, out: list[Sample], *, say_finished: bool) -> None:
        if run.state is RunState.STALLED:
            self._stalled(run, t, run.last_step, 0.0, out)
        run.state, run.reason, run.ended_at = RunState.ENDED, reason, t
        out.append(self._end_sample(run, t))
        if say_finished:
            out.append(Sample(SeriesKey(FINISHED, run.labels), t, run.last_step, 1.0))

    def _stalled(self, run: Run, t: float, step: int | None, value: float, out: list[Sample]) -> None:
        """`run.stalled` = `value`, and `run.hung` with it for a run of two ranks or more (0 where a 1 was said)."""
        out.append(Sample(SeriesKey(STALLED, run.labels), t, step, value))
        if value > 0 and len(run.ranks) >= 2:
            run.hung = True
            out.append(Sample(SeriesKey(HUNG, run.labels), t, step, value))
        elif value <= 0 and run.hung:
            run.hung = False
            out.append(Sample(SeriesKey(HUNG, run.labels), t, step, value))

    def _retract(self, run: Run, t: float, out: list[Sample]) -> None:
        """The run's end as said so far was wrong (better evidence came): its `run.end` series back to 0."""
        if run.state is RunState.ENDED:
            out.append(self._end_sample(run, t, 0.0))

    def _restart(self, run: Run, t: float, out: list[Sample]) -> None:
        """An ended run writes again (relaunched under its name, or resumed): a new episode. Its end series
        go back to 0, so the alerts of the last end resolve and `absent` watches it again."""
        out.append(self._end_sample(run, t, 0.0))
        out.append(Sample(SeriesKey(FINISHED, run.labels), t, run.last_step, 0.0))
        run.state, run.reason, run.exit_code, run.ended_at = RunState.RUNNING, None, None, None
        run.failed_rank = None
        run._crashed = run.stop_requested = False
        if run.recovery is not None:
            run.recovery = {**run.recovery, "recovering": False}

    def _end_sample(self, run: Run, t: float, value: float = 1.0) -> Sample:
        extra = {"reason": run.reason.value if run.reason else "unknown"}
        if run.exit_code is not None:
            extra["exit_code"] = str(run.exit_code)
        if value > 0:
            failed = run.reason in (EndReason.CRASHED, EndReason.KILLED)
            run._end_rank = run.failed_rank if failed else None
        if run._end_rank is not None:
            extra["rank"] = run._end_rank
        labels = make_labels({**dict(run.labels), **extra})
        return Sample(SeriesKey(END, labels), t, run.last_step, value)


def _kind(key: SeriesKey) -> int | tuple[str, str, str | None]:
    """How `observe` takes the samples of `key`: _SKIP, _OTHER, or the run whose progress they are."""
    source, name, metric = key.label("source"), key.label("run"), key.metric
    if source is None or name is None or metric in DERIVED:
        return _SKIP
    if metric in MARKERS or metric == HF_SUMMARY or metric.endswith("/" + HF_SUMMARY):
        return _OTHER
    return (source, name, key.label("rank"))
