"""What `recover` would have done over a recorded run: the dry-run's recoveries. Pure: the route's receivers, the
policies and the ledgers are arguments (the caller reads the ledgers).

For each FIRING transition (one firing: the notifier acts on each once) whose alert reaches a `recover` notifier
(the rule's own `notify:` list, else the route's receivers for the alert's labels as the dispatcher matches them:
`alertname` and `rule` the rule's name), `alertd.runs.recovery.decide` is asked, as alertd exec's supervisor asks
it, with the run's history so far (one per run: its `source` and `run` labels), the incident's attempt being 1 +
the run's recoveries so far, and the ledger's entries as the caller gives them (a recorded run's checkpoints are
taken as still on disk; those saved after the incident's time are excluded by `decide`). A plan made is added to
the run's history, so a repeat near the same step shows the widened plan. Once a run gave up, it was stopped for
good: later incidents say so. A second `recover` notifier for the same firing is refused, as the supervisor
refuses a recovery while one is under way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alertd.dispatch.matchers import alert_label_map
from alertd.dispatch.routes import Route
from alertd.model import Transition, TransitionKind, format_time, format_value
from alertd.runs.recovery import History, Incident, NoPlan, Plan, RecoverPolicy, decide

Entries = Sequence[Mapping[str, Any]]
Ledger = Callable[[str, str, str], Sequence[Mapping[str, Any]] | str]
"""(notifier, source, run) -> the ledger's entries, oldest first, or why there is none to read (a refusal)."""
ReceiversOf = Callable[[Mapping[str, str]], Iterable[str]]
"""The receivers the route sends an alert with these labels to."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """What one `recover` notifier would have done about one firing: a plan, or why none (`give_up`: the run
    would have been stopped for good)."""

    notifier: str
    rule: str
    step: int | None
    time: float
    source: str
    run: str
    outcome: Plan | NoPlan

    @property
    def plan(self) -> Plan | None:
        return self.outcome if isinstance(self.outcome, Plan) else None

    def as_json(self) -> dict[str, Any]:
        """The body of a dry-run's `{"recover": ...}` line (and of the API's `recoveries` entries)."""
        plan, out = self.plan, self.outcome
        return {
            "notifier": self.notifier,
            "rule": self.rule,
            "step": self.step,
            "run": self.run,
            "source": self.source,
            "time": format_time(self.time),
            "plan": plan.as_json(self.run, self.time) if plan is not None else None,
            "refused": out.why if isinstance(out, NoPlan) else None,
            "give_up": isinstance(out, NoPlan) and out.give_up,
            "summary": self.summary(),
        }

    def summary(self) -> str:
        """The plan in words (`Plan.describe`), or `REFUSED: why` / `GAVE UP: why`."""
        out = self.outcome
        return out.describe() if isinstance(out, Plan) else f"{'GAVE UP' if out.give_up else 'REFUSED'}: {out.why}"

    def text(self) -> str:
        """The indented line under the transition's in text output."""
        return f"  -> recover {self.notifier}: {self.summary()}"


def route_receivers(route: Route) -> ReceiversOf:
    """The receivers of the routes `route` sends an alert with these labels to (`Route.match`), in order."""

    def receivers(labels: Mapping[str, str]) -> list[str]:
        found: list[str] = []
        for r in route.match(labels):
            found += [name for name in r.receivers if name not in found]
        return found

    return receivers


@dataclass
class Recoveries:
    """The recoveries of a replay so far, one transition at a time (`after`), in time order."""

    receivers_of: ReceiversOf
    policies: Mapping[str, RecoverPolicy]
    """The `recover` notifiers, by name."""
    ledger: Ledger
    histories: dict[tuple[str, str], History] = field(default_factory=dict)
    stopped: dict[tuple[str, str], Replayed] = field(default_factory=dict)
    """The runs given up on, and the give-up."""

    def after(self, t: Transition) -> list[Replayed]:
        """What the `recover` notifiers `t` reaches would have done (nothing unless it is a FIRING)."""
        if t.state is not TransitionKind.FIRING or not self.policies:
            return []
        names = t.notify if t.notify else tuple(self.receivers_of(alert_label_map(t.rule, t.labels, t.severity)))
        mine = [n for n in dict.fromkeys(names) if n in self.policies]
        if not mine:
            return []
        labels = dict(t.labels)
        key = (labels.get("source", ""), labels.get("run", ""))
        out: list[Replayed] = []
        for name in mine:
            out.append(self._one(name, t, key, out))
        return out

    def _one(self, name: str, t: Transition, key: tuple[str, str], earlier: list[Replayed]) -> Replayed:
        source, run = key

        def replayed(outcome: Plan | NoPlan) -> Replayed:
            return Replayed(name, t.rule, t.step, t.time, source, run, outcome)

        history = self.histories.get(key, History())
        stopped = self.stopped.get(key)
        if stopped is not None:
            at = "" if stopped.step is None else f" at step {stopped.step}"
            return replayed(NoPlan(f"the run was stopped for good already ({stopped.rule}{at})", give_up=True))
        acting = next((r.plan for r in earlier if r.plan is not None), None)
        if acting is not None:
            return replayed(NoPlan(f"a recovery of attempt {acting.incident.attempt} is under way already"))
        entries = self.ledger(name, source, run)
        if isinstance(entries, str):
            return replayed(NoPlan(entries))
        value = format_value(t.value)
        incident = Incident(t.rule, t.step, t.time, 1 + history.recoveries, str(value))
        outcome = decide(self.policies[name], history, incident, entries, _on_disk)
        got = replayed(outcome)
        if isinstance(outcome, Plan):
            self.histories[key] = history.with_plan(outcome)
        elif outcome.give_up:
            self.stopped[key] = got
        return got


def replay_recoveries(
    transitions: Iterable[Transition],
    receivers_of: ReceiversOf,
    policies: Mapping[str, RecoverPolicy],
    ledger: Ledger,
) -> list[Replayed]:
    """Every recovery the `recover` notifiers would have made over `transitions` (in time order)."""
    state = Recoveries(receivers_of, policies, ledger)
    return [r for t in transitions for r in state.after(t)]


def _on_disk(_: str) -> bool:
    return True  # a recorded run's rotated checkpoints were there at the time
