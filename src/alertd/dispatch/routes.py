"""The routing tree and inhibition rules, as in Alertmanager (pure: no I/O, no clock reads).

Defaults, inherited down the tree by every route that leaves a value unset:

| field | alertd | Alertmanager | why |
| --- | --- | --- | --- |
| `group_by` | `[rule, run]` | none (one group) | one run's NaN must not wait behind another run's group |
| `group_wait` | `0s` | `30s` | a NaN loss is reported within seconds, not half a minute |
| `group_interval` | `1m` | `5m` | a second alert in a group waits at most a minute |
| `repeat_interval` | `4h` | `4h` | |
| `send_resolved` | true | true (webhook) | |
| `receivers` | none | (required) | an alert that reaches no receiver is reported as `unrouted` |

`group_by: ["..."]` groups by every label (no grouping), as in Alertmanager. Repeats are checked when a
group is flushed, so the effective repeat interval is rounded up to a multiple of `group_interval`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from alertd.dispatch.matchers import Matcher, matches_all
from alertd.dispatch.timeintervals import Period
from alertd.model import Labels

DEFAULT_GROUP_BY: tuple[str, ...] = ("rule", "run")
DEFAULT_GROUP_WAIT = 0.0
DEFAULT_GROUP_INTERVAL = 60.0
DEFAULT_REPEAT_INTERVAL = 4 * 3600.0
DEFAULT_SEND_RESOLVED = True
GROUP_BY_ALL = "..."


@dataclass(frozen=True, slots=True)
class Route:
    """One node of the routing tree with every value resolved (inheritance already applied).

    `key` names the node in group keys: `{}` for the root, then `/`-separated child positions and matchers.
    """

    matchers: tuple[Matcher, ...] = ()
    receivers: tuple[str, ...] = ()
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    group_wait: float = DEFAULT_GROUP_WAIT
    group_interval: float = DEFAULT_GROUP_INTERVAL
    repeat_interval: float = DEFAULT_REPEAT_INTERVAL
    send_resolved: bool = DEFAULT_SEND_RESOLVED
    continue_: bool = False
    children: tuple[Route, ...] = ()
    key: str = "{}"
    mute_time_intervals: tuple[tuple[str, tuple[Period, ...]], ...] = ()
    """Named intervals (`alertd.dispatch.timeintervals`) during which this route sends nothing."""
    active_time_intervals: tuple[tuple[str, tuple[Period, ...]], ...] = ()
    """When set, this route sends only during one of these named intervals."""

    def muted_by(self, now: float) -> str | None:
        """Why this route sends nothing at `now`: `mute interval <name>` or `outside active intervals
        <names>`; None when it may send (Alertmanager's TimeMuteStage and TimeActiveStage)."""
        for name, periods in self.mute_time_intervals:
            if any(p.contains(now) for p in periods):
                return f"mute_time_intervals {name}"
        if self.active_time_intervals and not any(
            p.contains(now) for _, periods in self.active_time_intervals for p in periods
        ):
            return "active_time_intervals " + ",".join(n for n, _ in self.active_time_intervals)
        return None

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        """The routes that handle an alert with these labels (Alertmanager's `Route.Match`).

        Children are tried in order; the first that matches wins unless it sets `continue`. When no child
        matches, this node itself handles the alert. A node whose matchers fail returns [].
        """
        if not matches_all(self.matchers, labels):
            return []
        found: list[Route] = []
        for child in self.children:
            hits = child.match(labels)
            found.extend(hits)
            if hits and not child.continue_:
                break
        return found or [self]

    def group_labels(self, labels: Mapping[str, str]) -> Labels:
        """The labels that name the alert's group on this route (missing labels are left out)."""
        if GROUP_BY_ALL in self.group_by:
            return tuple(sorted(labels.items()))
        return tuple(sorted((k, labels[k]) for k in set(self.group_by) if labels.get(k, "") != ""))

    def with_children(self, children: Iterable[Route]) -> Route:
        """A copy with other children (used by the config converter)."""
        return Route(
            self.matchers,
            self.receivers,
            self.group_by,
            self.group_wait,
            self.group_interval,
            self.repeat_interval,
            self.send_resolved,
            self.continue_,
            tuple(children),
            self.key,
            self.mute_time_intervals,
            self.active_time_intervals,
        )

    def walk(self) -> Iterator[Route]:
        """This route and all its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def receiver_names(self) -> set[str]:
        """Every receiver named anywhere in the tree (for the config's reference check)."""
        return {r for node in self.walk() for r in node.receivers}


def child_key(parent_key: str, index: int, matchers: Iterable[Matcher]) -> str:
    """The key of the `index`-th child: `{}/0{severity="critical"}`."""
    return f"{parent_key}/{index}{{{','.join(str(m) for m in matchers)}}}"


def bypass_route(root: Route, receivers: tuple[str, ...]) -> Route:
    """The route of a rule with its own `notify:` list: those receivers, the root's grouping and timing."""
    return Route(
        receivers=receivers,
        group_by=root.group_by,
        group_wait=root.group_wait,
        group_interval=root.group_interval,
        repeat_interval=root.repeat_interval,
        send_resolved=root.send_resolved,
        key="notify:" + ",".join(receivers),
    )


@dataclass(frozen=True, slots=True)
class InhibitRule:
    """While a firing alert matches `source`, alerts matching `target` with the same `equal` labels are muted.

    As in Alertmanager: a label missing on both sides counts as equal, and an alert that matches both
    sides can't inhibit an alert that also matches both sides (so it can't inhibit itself).
    """

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...] = ()

    def inhibitor(
        self, fingerprint: str, labels: Mapping[str, str], sources: Mapping[str, Mapping[str, str]]
    ) -> str | None:
        """The fingerprint of a firing alert (from `sources`) that mutes this one, or None."""
        if not matches_all(self.target, labels):
            return None
        two_sided = matches_all(self.source, labels)
        for fp, src in sources.items():
            if fp == fingerprint or not matches_all(self.source, src):
                continue
            if any(src.get(n, "") != labels.get(n, "") for n in self.equal):
                continue
            if two_sided and matches_all(self.target, src):
                continue
            return fp
        return None
