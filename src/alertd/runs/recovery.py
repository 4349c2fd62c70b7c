"""`recover`'s choice after an incident: which checkpoint to go back to, which updates to skip, how much to cut
the LR, or why not. Pure: the ledger's entries, the run's earlier incidents and the time are arguments.

An incident is an alert that fired for the run (its rule, its step, its time, the attempt it came in). Given the
checkpoint ledger (`alertd.integrations.ledger`: one entry per save, `finite` and `saved` flags) it plans:

- the checkpoint: the newest entry saved with finite weights, saved before the incident, at least `rollback`
  steps before the incident's step (and still on disk, as `exists` says); none: refused, and said so;
- the updates to skip after it: `skip` of them from the checkpoint's step on, or, by default, every update
  through the one after the incident's step (frameworks differ by one in the step they give a loss: HF the
  update's count after it, Lightning before it);
- the LR factor: `lr_scale`.

An incident at about the same step as an earlier one (within `near` steps: the recovery did not get past it)
widens the plan, `k` times for `k` such earlier incidents: the rollback doubles each time (and an older
checkpoint than the last plan's is taken where the ledger still has one), the skipped range grows by its own
length, the LR cut compounds (`lr_scale ** (k + 1)`). After `max_attempts` recoveries the next incident gives up:
no plan, a page, and the run stops for good. An incident whose attempt's output showed an event of `give_up_on`
(CUDA out of memory by default) is never recovered: a restart would fail the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GIVE_UP_ON = ("cuda_oom",)
NEAR = 10
"""Steps within which an incident counts as the same one again, unless `near` or a larger `rollback` says."""


@dataclass(frozen=True, slots=True)
class RecoverPolicy:
    """The keys of a `recover` notifier."""

    rollback: int = 0
    """Steps before the incident the checkpoint must at least be."""
    skip: int | None = None
    """Updates after the checkpoint to skip; None: through the one after the incident's step."""
    lr_scale: float = 0.5
    max_attempts: int = 3
    """Recoveries at most; the next incident gives up."""
    backoff: float = 0.0
    """Seconds between the end of the stopped attempt and the start of the next."""
    give_up_on: frozenset[str] = frozenset(GIVE_UP_ON)
    near: int | None = None
    """Steps within which an incident is the same again (None: the larger of `rollback` and NEAR)."""

    @property
    def nearby(self) -> int:
        return self.near if self.near is not None else max(self.rollback, NEAR)


@dataclass(frozen=True, slots=True)
class Incident:
    """An alert that fired for the run: the reason for a recovery."""

    rule: str
    step: int | None
    time: float
    attempt: int
    value: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "step": self.step, "time": self.time, "attempt": self.attempt, "value": self.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Incident:
        step = data.get("step")
        return cls(
            str(data.get("rule", "")),
            step if isinstance(step, int) and not isinstance(step, bool) else None,
            float(data.get("time", 0.0)),
            int(data.get("attempt", 1)),
            str(data.get("value", "")),
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """What the next attempt does: resume from `checkpoint` (at `checkpoint_step`), drop the updates `skip`
    (inclusive; None: none), multiply the LR by `lr_factor`. `widened`: how many earlier incidents at about
    the same step made it wider."""

    attempt: int
    checkpoint: str
    checkpoint_step: int
    skip: tuple[int, int] | None
    lr_factor: float
    incident: Incident
    widened: int = 0

    def describe(self) -> str:
        """One line for people."""
        skip = f"updates {self.skip[0]}-{self.skip[1]} skipped" if self.skip else "no update skipped"
        wider = f" (widened: incident {self.widened + 1} at about step {self.incident.step})" if self.widened else ""
        return (
            f"attempt {self.attempt}: back to {self.checkpoint} (step {self.checkpoint_step}), {skip}, "
            f"LR x{self.lr_factor:g}{wider}"
        )

    def as_json(self, run: str, now: float) -> dict[str, Any]:
        """The plan file's body (`alertd.integrations.plan`)."""
        return {
            "version": 1,
            "run": run,
            "attempt": self.attempt,
            "checkpoint": self.checkpoint,
            "checkpoint_step": self.checkpoint_step,
            "skip": list(self.skip) if self.skip else [],
            "lr_factor": self.lr_factor,
            "incident": self.incident.as_json(),
            "time": now,
        }


@dataclass(frozen=True, slots=True)
class NoPlan:
    """No recovery: why. `give_up`: the run is to stop for good (attempts spent, or an event a restart can't help)."""

    why: str
    give_up: bool = False


@dataclass(frozen=True, slots=True)
class History:
    """A run's recoveries so far: the incidents that caused them and the plans made, oldest first."""

    incidents: tuple[Incident, ...] = ()
    plans: tuple[Plan, ...] = field(default_factory=tuple)

    @property
    def recoveries(self) -> int:
        return len(self.plans)

    def with_plan(self, plan: Plan) -> History:
        return History((*self.incidents, plan.incident), (*self.plans, plan))


def decide(
    policy: RecoverPolicy,
    history: History,
    incident: Incident,
    entries: Sequence[Mapping[str, Any]],
    exists: Callable[[str], bool],
    events: Iterable[str] = (),
) -> Plan | NoPlan:
    """The plan for the attempt after `incident`, or why there is none. `entries`: the ledger's, oldest first;
    `events`: those the incident's attempt showed in its output (`cuda_oom`, `traceback`, ...)."""
    fatal = sorted(set(events) & policy.give_up_on)
    if fatal:
        return NoPlan(f"its output showed {', '.join(fatal)}: a restart can't help (give_up_on)", give_up=True)
    if history.recoveries >= policy.max_attempts:
        n = policy.max_attempts
        return NoPlan(f"gave up after {n} recover{'ies' if n != 1 else 'y'} (max_attempts: {n})", give_up=True)
    widened = _repeats(policy, history, incident)
    rollback = policy.rollback * 2**widened if widened else policy.rollback
    earlier = [p.checkpoint_step for p in history.plans if _near(policy, p.incident, incident)]
    good = [e for e in _good(entries, incident, exists) if incident.step is None or e[0] <= incident.step - rollback]
    if not good:
        return NoPlan(_none_found(incident, rollback))
    older = [e for e in good if earlier and e[0] < min(earlier)]
    step, path = (older or good)[-1]
    last = _skip_end(policy, incident, step, widened)
    skip = (step + 1, last) if last is not None and last > step else None
    factor = policy.lr_scale ** (widened + 1)
    return Plan(incident.attempt + 1, path, step, skip, factor, incident, widened)


def _good(
    entries: Sequence[Mapping[str, Any]], incident: Incident, exists: Callable[[str], bool]
) -> list[tuple[int, str]]:
    """(step, path) of each checkpoint saved with finite weights before the incident, on disk; by step."""
    out: dict[str, int] = {}
    for e in entries:
        step, path, when = e.get("step"), e.get("path"), e.get("time")
        if not (isinstance(step, int) and not isinstance(step, bool) and isinstance(path, str)):
            continue
        if isinstance(when, int | float) and math.isfinite(when) and when > incident.time:
            continue  # saved after the incident (a save in the stop, a later attempt's): not a way back from it
        if incident.step is not None and step > incident.step:
            continue
        if e.get("finite") is True and e.get("saved") is True:
            out[path] = step
        else:
            out.pop(path, None)  # a later veto or a failed save at the same path: not that one
    return sorted((step, path) for path, step in out.items() if exists(path))


def _near(policy: RecoverPolicy, a: Incident, b: Incident) -> bool:
    return a.step is not None and b.step is not None and abs(a.step - b.step) <= policy.nearby


def _repeats(policy: RecoverPolicy, history: History, incident: Incident) -> int:
    return sum(1 for earlier in history.incidents if _near(policy, earlier, incident))


def _skip_end(policy: RecoverPolicy, incident: Incident, checkpoint: int, widened: int) -> int | None:
    if policy.skip is not None:
        return checkpoint + policy.skip * 2**widened if policy.skip else None
    if incident.step is None:
        return None
    end = incident.step + 1
    return end + widened * (end - checkpoint)


def _none_found(incident: Incident, rollback: int) -> str:
    if incident.step is None:
        return "no checkpoint with finite weights saved before the incident is in the ledger"
    limit = incident.step - rollback
    return (
        f"no checkpoint with finite weights at step {limit} or before (the incident's step {incident.step}"
        + (f" less rollback {rollback})" if rollback else ")")
        + " is in the ledger"
    )
