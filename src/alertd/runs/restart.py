"""The restart policy of `alertd exec`: whether a child that ended is started again, when, and why not. Pure.

An attempt's end is told by its exit status (subprocess's returncode: -N for signal N), whether someone outside
asked it to stop (a signal alertd exec took and forwarded, or a Ctrl-C the terminal sent to both), whether alertd
itself acted to stop it (an action, the exec stop on a NaN), and the fatal events its output showed. Its ending:

- `finished`: exit status 0;
- `crashed`: a non-zero exit status;
- `lost`: ended by a signal alertd did not send (SIGKILL by the OOM killer): status -N, or 128+N from a shell;
- `interrupted`: a user's interrupt (a signal to alertd exec, a status of 130 or -SIGINT);
- `stopped`: alertd stopped it (that is `recover`'s business, never a plain restart's);
- `cuda_oom` (an event in `NEVER_ON`): a restart would run out of memory again.

Only `crashed` and `lost` can be restarted, and only those of them the policy's `on` names, at most `max` times,
`backoff` seconds after the end. Time is an argument; nothing here reads a clock.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

FINISHED, CRASHED, LOST, INTERRUPTED, STOPPED = "finished", "crashed", "lost", "interrupted", "stopped"
RESTARTABLE: Final[tuple[Literal["crashed"], Literal["lost"]]] = ("crashed", "lost")
"""The endings a policy's `on` may name."""
NEVER_ON = ("cuda_oom",)
"""Fatal events of the output after which restarting can't help."""
_SIGINT = int(signal.SIGINT)


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How one attempt ended."""

    status: int
    """Its exit status as subprocess's returncode (-N: signal N)."""
    interrupted: bool = False
    """Someone outside asked it to stop: a signal alertd exec took (and forwarded, or the child had already)."""
    stopped: bool = False
    """alertd stopped it: one of its actions acted, or the child honoured its stop request."""
    events: frozenset[str] = frozenset()
    """The events its output showed (`cuda_oom`, `traceback`, ...)."""

    def ending(self) -> str:
        """`finished`, `crashed`, `lost`, `interrupted`, `stopped`, or the event in `NEVER_ON` it showed."""
        if self.stopped:
            return STOPPED
        if self.interrupted or self.status in (128 + _SIGINT, -_SIGINT):
            return INTERRUPTED
        for event in NEVER_ON:
            if event in self.events:
                return event
        if self.status == 0:
            return FINISHED
        if self.status < 0 or 128 < self.status <= 128 + 64:
            return LOST
        return CRASHED


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after an attempt ended: start attempt `attempt` at `at`, or not (`why`)."""

    restart: bool
    ending: str
    why: str
    attempt: int
    """The attempt that would come next (2 after the first)."""
    at: float | None = None


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """`restart: {on: [crashed, lost], max: 3, backoff: 30s}`: restart on the endings `on` names, `max_restarts`
    times at most, `backoff` seconds after each end."""

    on: frozenset[str] = frozenset(RESTARTABLE)
    max_restarts: int = 3
    backoff: float = 30.0

    @classmethod
    def of(cls, on: Iterable[str] = RESTARTABLE, max_restarts: int = 3, backoff: float = 30.0) -> RestartPolicy:
        """A policy; ValueError for an ending that can't be restarted, a negative `max_restarts` or `backoff`."""
        wrong = sorted(set(on) - set(RESTARTABLE))
        if wrong:
            raise ValueError(f"can't restart on {', '.join(wrong)}: only on {' and '.join(RESTARTABLE)}")
        if max_restarts < 0 or backoff < 0:
            raise ValueError("the number of restarts and the backoff can't be negative")
        return cls(frozenset(on), max_restarts, backoff)

    def decide(self, end: AttemptEnd, attempt: int, now: float) -> Decision:
        """After attempt `attempt` (1: the first start) ended at `now` as `end` says: start the next or not."""
        ending = end.ending()
        nxt = attempt + 1
        if ending not in RESTARTABLE:
            return Decision(False, ending, _NEVER.get(ending, f"it ended with {ending}: never restarted"), nxt)
        if ending not in self.on:
            return Decision(False, ending, f"restart.on does not name {ending}", nxt)
        if attempt > self.max_restarts:
            n = self.max_restarts
            return Decision(False, ending, f"gave up after {n} restart{'s' * (n != 1)} (restart.max: {n})", nxt)
        return Decision(True, ending, f"restart {attempt} of {self.max_restarts}", nxt, now + self.backoff)


_NEVER = {
    FINISHED: "it finished",
    INTERRUPTED: "a user's interrupt is never restarted",
    STOPPED: "alertd stopped it: never restarted",
    "cuda_oom": "CUDA out of memory: a restart would run out again",
}
