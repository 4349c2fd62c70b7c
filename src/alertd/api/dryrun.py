"""`POST /api/v1/dry-run`: rules from a request over inline samples or a source under an allowed root.

Nothing here sends or kills: no notifier object is ever built; the notifications are what the
rules' route would have produced (`plan` over the transitions, in time order, from a fresh state).
It runs in a worker process of its own (`alertd.api.worker`), which the service kills at the
request's time limit.
"""

from __future__ import annotations

import asyncio
import glob
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import TypeAdapter

from alertd.actions.config import RecoverConfig, action_receivers
from alertd.actions.recover import ledger_dir
from alertd.api.models import MAX_TIME
from alertd.columns import ColumnList
from alertd.config import Config
from alertd.config.merge import _merge
from alertd.config.validate import _validate
from alertd.dispatch.plan import PlanState, plan
from alertd.dispatch.routes import Route
from alertd.dryrun import replay, root_run_name, transition_json
from alertd.errors import ConfigError, NotifyError, Problem, SourceError
from alertd.integrations.ledger import LEDGER_NAME, ledger_path
from alertd.integrations.ledger import read as read_ledger
from alertd.model import Notification, Sample, Transition, format_time
from alertd.plot.build import figure, runs_in
from alertd.plot.svg import figure_svg
from alertd.rules.evaluate import RuleSet
from alertd.runs.recovery_replay import Replayed, replay_recoveries, route_receivers
from alertd.sources.config import SourceConfig
from alertd.sources.registry import build_source
from alertd.sources.samples import SampleLineError, parse_sample, parse_time, read_samples
from alertd.yamlfile import parse_yaml

RULES_FILE = "<dry-run rules>"
MAX_FLUSHES = 10_000
MAX_POLLS = 10_000
"""Polls of one source at most (each reads at most its per-poll budget: 256 MiB of an event file)."""
MAX_PLOTS = 10
"""Runs a dry run draws at most (the first ones in the data)."""
MAX_WALK = 100_000
"""Entries of a source's directory looked at for links that lead out of the allowed roots."""


class DryRunError(Exception):
    """A request the dry run refuses: `status` is the HTTP status, `errors` say why."""

    def __init__(self, status: int, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.status = status
        self.errors = errors


@dataclass
class DryRunJob:
    """One dry run's inputs; `run()` is called in a worker process."""

    rules: str | dict[str, Any]
    samples: list[dict[str, Any]]
    source: tuple[str, str] | None = None
    until: float | str | None = None
    plot: bool = False
    """Also draw each run (at most `MAX_PLOTS`) as an SVG: its series and where each rule was pending/firing."""
    roots: Sequence[str] = ()
    """The allowed directories: a `recover` notifier's checkpoint ledger is read only from under them."""

    def run(self) -> dict[str, Any]:
        """The transitions, would-be notifications and recoveries, as the JSON response."""
        config = rules_from_text(self.rules)
        until = _until(self.until)
        samples: list[Sample] = ColumnList(self._inline())  # and the columns the source's reads come with
        if self.source is not None:
            samples += self._from_source(*self.source)
        transitions = list(replay(RuleSet(config.rules), samples, config.buffer, until, config.stall_after))
        notes = would_send(config, transitions, until)
        recoveries = would_recover(config, transitions, self._ledger_dir, self.roots)
        out: dict[str, Any] = {
            "samples": len(samples),
            "transitions": [transition_json(t) for t in transitions],
            "notifications": [notification_json(n) for n in notes],
            "recoveries": [r.as_json() for r in recoveries],
        }
        if self.plot:
            out["plots"] = [
                {
                    "source": src,
                    "run": run,
                    "svg": figure_svg(figure(samples, transitions, src, run, recoveries=recoveries)),
                }
                for src, run in runs_in(samples)[:MAX_PLOTS]
            ]
        return out

    @property
    def _ledger_dir(self) -> str | None:
        """Where a `recover` notifier without `checkpoints:` finds the ledger: a samples file's directory."""
        if self.source is not None and self.source[0] == "samples":
            return os.path.dirname(self.source[1])
        return None

    def _inline(self) -> list[Sample]:
        out, errors = [], []
        for i, item in enumerate(self.samples):
            try:
                out.append(_checked(parse_sample(json.dumps(item))))
            except (SampleLineError, ValueError) as exc:
                errors.append(f"samples[{i}]: {exc}")
                if len(errors) >= 20:
                    break
        if errors:
            raise DryRunError(400, errors)
        return out

    def _from_source(self, kind: str, path: str) -> list[Sample]:
        if kind == "samples":
            return self._read_file(path)
        if kind in ("textlog", "csv") and glob.has_magic(path):
            raise DryRunError(400, [f"a {kind} dry-run reads one file: no wildcards in the path"])
        location = {"tensorboard": "logdir", "mlflow": "tracking_uri"}.get(kind, "path")
        extra = {"runs": "all"} if kind == "mlflow" else {}
        fields = {"type": kind, "name": "dry-run", location: path, **extra}
        cfg = TypeAdapter(SourceConfig).validate_python(fields)
        return asyncio.run(_poll_once(cfg, root_run_name(path) if kind == "tensorboard" else None))

    def _read_file(self, path: str) -> list[Sample]:
        out: list[Sample] = []
        try:
            for item in read_samples(path, "dry-run"):
                if isinstance(item, Sample):
                    out.append(_checked(item))
        except OSError as exc:
            raise DryRunError(400, [f"can't read the samples file: {exc.strerror or exc}"]) from exc
        except ValueError as exc:
            raise DryRunError(400, [str(exc)]) from exc
        return out


async def _poll_once(cfg: SourceConfig, root_run: str | None = None) -> list[Sample]:
    source = build_source(cfg, root_run)
    try:
        out: list[Sample] = ColumnList()  # with the columns a source's reads come with (`alertd.columns`)
        out += _all_checked(await source.poll(time.time()))
        for _ in range(MAX_POLLS):  # a source that reads a bounded amount per poll says it has more
            if not getattr(source, "behind", False):
                break
            out += _all_checked(await source.poll(time.time()))
        return out
    except SourceError as exc:
        raise DryRunError(400, [f"the source can't be read: {exc}"]) from exc
    finally:
        await source.aclose()


def _all_checked(samples: Sequence[Sample]) -> Sequence[Sample]:
    """`samples` themselves (a `ColumnList` keeps its columns), each `_checked`."""
    for s in samples:
        _checked(s)
    return samples


def _checked(s: Sample) -> Sample:
    if not (math.isfinite(s.time) and 0 <= s.time <= MAX_TIME):
        raise ValueError(f"time must be between 1970 and 9999, got {s.time!r}")
    return s


def _until(value: float | str | None) -> float | None:
    if value is None:
        return None
    try:
        t = parse_time(value)
    except SampleLineError as exc:
        raise DryRunError(400, [f"until: {exc}"]) from exc
    if not (math.isfinite(t) and 0 <= t <= MAX_TIME):
        raise DryRunError(400, ["until: must be between 1970 and 9999"])
    return t


def rules_from_text(rules: str | Mapping[str, Any]) -> Config:
    """A rules file given as YAML text or as a JSON object, loaded as `load_config` loads a file.

    `${VAR}` is expanded from an empty environment: a request can never read the server's variables.
    """
    text = rules if isinstance(rules, str) else json.dumps(rules)
    try:
        doc = parse_yaml(text, RULES_FILE, {}, keep_going=True)
        problems: list[Problem] = list(doc.problems)  # a `${VAR}` (never set here) with the other problems
        model = _validate(doc, problems, frozenset(p.place for p in doc.problems))
        if model is None or problems:
            raise ConfigError(problems)
        return _merge([(doc, model)], (RULES_FILE,))
    except ConfigError as exc:
        raise DryRunError(400, [str(p) for p in exc.problems]) from exc
    except yaml.YAMLError as exc:  # parse_yaml lets a bad character through (raised before its `try`)
        raise DryRunError(400, [f"{RULES_FILE}: invalid YAML: {exc}"]) from exc
    except (ValueError, RecursionError) as exc:
        raise DryRunError(400, [f"{RULES_FILE}: {type(exc).__name__}: {exc}"]) from exc


def resolve_under(path: str, roots: Sequence[str]) -> str:
    """The real path of `path` if it lies inside one of `roots` (a relative path is taken from each
    root in turn); raise DryRunError 403 otherwise. Symbolic links are followed before the check."""
    if not roots:
        raise DryRunError(403, ["source dry-runs are disabled: the server allows no directory"])
    if "\x00" in path:
        raise DryRunError(403, ["the path is outside the allowed directories"])
    for root in roots:
        real_root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(real_root, path))
        if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
            return real
    raise DryRunError(403, ["the path is outside the allowed directories"])


def refuse_links_out(path: str, roots: Sequence[str], limit: int = MAX_WALK) -> None:
    """Raise DryRunError 403 if a symbolic link under the directory `path` leads outside `roots`.

    The worker is also confined (`alertd.sources.fileopen.confine`): a source never reads such a file,
    whatever it meets. This look beforehand is what lets the answer say so, where a source would only
    log that a file could not be read. At most `limit` entries are looked at.
    """
    if not os.path.isdir(path):
        return
    real_roots = [os.path.realpath(r) for r in roots]
    seen = 0
    for top, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            seen += 1
            if seen > limit:
                return
            entry = os.path.join(top, name)
            if not os.path.islink(entry):
                continue
            real = os.path.realpath(entry)
            if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in real_roots):
                rel = os.path.relpath(entry, path)
                raise DryRunError(403, [f"refused: {rel} is a link to outside the allowed directories"])


def would_send(config: Config, transitions: Sequence[Transition], until: float | None) -> list[Notification]:
    """The notifications the route would have sent: `plan` at each transition's time, then the group
    timers due up to `until`, or else up to the last transition plus the longest `group_wait` or
    `group_interval` of the routes (so every change is flushed once; later repeats are not shown)."""
    route = config.route.to_route()
    inhibit = [r.to_rule() for r in config.inhibit_rules]
    actions = action_receivers(config.notifiers)
    state, next_run = PlanState(), None
    out: list[Notification] = []
    for at, batch in _by_time(transitions):
        while next_run is not None and next_run < at:
            state, next_run = _step(state, (), route, inhibit, actions, next_run, out)
        state, next_run = _step(state, batch, route, inhibit, actions, at, out)
    if transitions:
        horizon = until if until is not None else transitions[-1].time + _longest_wait(route)
        for _ in range(MAX_FLUSHES):
            if next_run is None or next_run > horizon:
                break
            state, next_run = _step(state, (), route, inhibit, actions, next_run, out)
    return out


def would_recover(
    config: Config, transitions: Sequence[Transition], default_dir: str | None, roots: Sequence[str]
) -> list[Replayed]:
    """What the `recover` notifiers would have done (`alertd.runs.recovery_replay`): each one's ledger read from
    its `checkpoints:` directory, else `default_dir`, and only from under `roots`."""
    recover = {name: n for name, n in config.notifiers.items() if isinstance(n, RecoverConfig)}
    if not recover:
        return []
    read: dict[str, list[dict[str, Any]] | str] = {}

    def ledger(notifier: str, source: str, run: str) -> list[dict[str, Any]] | str:
        try:
            where = ledger_dir(notifier, recover[notifier], {"source": source, "run": run}) or default_dir
        except NotifyError as exc:
            return str(exc)
        if where is None:
            return "no checkpoint ledger: give the notifier checkpoints: DIR (under an allowed directory)"
        if where not in read:
            read[where] = _read_ledger(where, roots)
        return read[where]

    policies = {name: n.policy() for name, n in recover.items()}
    return replay_recoveries(transitions, route_receivers(config.route.to_route()), policies, ledger)


def _read_ledger(where: str, roots: Sequence[str]) -> list[dict[str, Any]] | str:
    """The ledger's entries in directory `where`, or why none are read (outside the allowed directories)."""
    try:
        path = resolve_under(ledger_path(where), roots)
    except DryRunError as exc:
        return f"the checkpoint ledger in {where} is not read: {exc.errors[0]}"
    if not os.path.isfile(path):
        return f"no checkpoint ledger at {ledger_path(where)}"
    return read_ledger(os.path.dirname(path)) if os.path.basename(path) == LEDGER_NAME else []


def _step(
    state: PlanState,
    batch: Sequence[Transition],
    route: Route,
    inhibit: Sequence[Any],
    actions: frozenset[str],
    now: float,
    out: list[Notification],
) -> tuple[PlanState, float | None]:
    result = plan(state, transitions=batch, alerts=None, route=route, inhibit_rules=inhibit, now=now, immediate=actions)
    out.extend(result.notifications)
    return result.state, result.next_run


def _by_time(transitions: Sequence[Transition]) -> Iterator[tuple[float, list[Transition]]]:
    batch: list[Transition] = []
    for t in transitions:
        if batch and t.time != batch[0].time:
            yield batch[0].time, batch
            batch = []
        batch.append(t)
    if batch:
        yield batch[0].time, batch


def _longest_wait(route: Route) -> float:
    return max([route.group_wait, route.group_interval, *(_longest_wait(c) for c in route.children)])


def notification_json(n: Notification) -> dict[str, Any]:
    """A planned notification as JSON: receiver name, status, group and alerts (never a URL)."""
    return {
        "receiver": n.receiver,
        "status": n.status,
        "groupKey": n.group_key,
        "groupLabels": dict(n.group_labels),
        "time": format_time(n.created),
        "alerts": [transition_json(t) for t in n.alerts],
    }
