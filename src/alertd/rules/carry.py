"""Carrying alert state across a reload or a restart (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from alertd.buffer import SeriesBuffer
from alertd.model import Sample, SeriesKey
from alertd.rules.evaluate import EvalState, PairKey, RuleSet, find_joins
from alertd.rules.state import Track, next_event


def fingerprint(text: str) -> str:
    """A short, stable digest of a definition's text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rule_fingerprints(ruleset: RuleSet) -> dict[str, str]:
    """A digest of each rule's whole definition: equal digests, same rule."""
    return {r.name: fingerprint(repr(r)) for r in ruleset.rules}


def carry_over(prev: EvalState, old: RuleSet, new: RuleSet, buffer: SeriesBuffer) -> tuple[EvalState, set[str]]:
    """The state for `new` rules after a reload, and the names of the rules that did not change.

    Unchanged rules keep their alerts, streaks and timers. New and changed rules start from now: their
    tracks begin at the end of each series they watch, so the buffered past is not judged again.
    """
    old_fps, new_fps = rule_fingerprints(old), rule_fingerprints(new)
    kept = {name for name, fp in new_fps.items() if old_fps.get(name) == fp}
    tracks = {p: t for p, t in prev.tracks.items() if p[0] in kept}
    timers = {p: t for p, t in prev.timers.items() if p[0] in kept}
    for series in buffer:
        for rule in new.for_series(series.key):
            if rule.name not in kept and rule.expr is None:  # an expr rule's runs start from now too (evaluate)
                tr = tracks[(rule.name, series.key)] = Track()
                tr.generation, tr.position = series.generation, series.end
    joins = find_joins(new, buffer, tracks)  # expr rules: where each run's judging stands
    joins.update((j, v) for j, v in (prev.joins or {}).items() if j[0] in kept)
    return EvalState(tracks, timers, prev.version, frozenset(kept), joins=joins), kept


def restored(tracks: Mapping[PairKey, Track], ruleset: RuleSet, buffer: SeriesBuffer) -> EvalState:
    """The state for tracks read back after a restart, into a new, empty buffer.

    Each series gets back the last sample its tracks saw, so that the next sample still has a previous
    one (an `increasing` streak goes on across the restart); the tracks start after it.
    """
    last: dict[SeriesKey, Track] = {}
    for (_, key), tr in tracks.items():
        if tr.last_time is not None and (key not in last or tr.time > last[key].time):
            last[key] = tr
    buffer.append([Sample(key, tr.time, tr.step, tr.value) for key, tr in last.items()])
    for (_, key), tr in tracks.items():
        series = buffer.get(key)
        if series is not None:
            tr.generation, tr.position = series.generation, series.end
    timers = {}
    for pair, tr in tracks.items():
        due = next_event(ruleset.by_name[pair[0]], tr, None)
        if due is not None:
            timers[pair] = due
    joins = find_joins(ruleset, buffer, tracks)
    return EvalState(dict(tracks), timers, buffer.version, frozenset(ruleset.by_name), joins=joins)


Seen = dict[SeriesKey, tuple[float, int | None]]
"""Per series, the last sample the restored tracks evaluated: (time, step)."""


def seen_before(tracks: Mapping[PairKey, Track]) -> Seen:
    """The last sample each series' restored tracks evaluated (`restored` gives it back to the buffer)."""
    seen: Seen = {}
    for (_, key), tr in tracks.items():
        if tr.last_time is not None and (key not in seen or tr.time > seen[key][0]):
            seen[key] = (tr.time, tr.step)
    return seen


def unseen(samples: list[Sample], seen: Seen) -> list[Sample]:
    """The samples the restored state has not evaluated yet: a series' samples up to the last one its tracks saw
    (by time, and by step where both have one) are left out, as a source that reads again what it read before
    a crash gives them (its cursor committed before the state of its last samples: see `alertd.persist`).
    A series' first newer sample ends its check (`seen` loses it): from there its samples are new, a step
    that goes back included (a checkpoint restart, judged as such)."""
    out = []
    for s in samples:
        last = seen.get(s.series)
        if last is not None:
            time, step = last
            if s.time <= time and (s.step is None or step is None or s.step <= step):
                continue  # evaluated before the restart
            del seen[s.series]
        out.append(s)
    return out
