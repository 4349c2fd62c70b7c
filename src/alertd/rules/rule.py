"""A compiled rule: which series it watches, its condition and its modifiers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import translate

from alertd.model import Labels, SeriesKey
from alertd.rules.conditions import Absent, Condition
from alertd.rules.expr import Expr
from alertd.rules.peers import Peers
from alertd.templating.annotations import Template
from alertd.userregex import UserRegex, compile_user_regex

_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True, slots=True)
class LabelMatcher:
    """`name op value` with op `=`, `!=`, `=~` or `!~` (regexes are anchored). A missing label is ''."""

    name: str
    op: str
    value: str
    regex: UserRegex | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, name: str, spec: str) -> LabelMatcher:
        """`{run: exp1}`, `{run: "=~exp.*"}`, `{run: "!=exp2"}`, `{run: "!~tmp.*"}` (RE2, anchored: linear time);
        raises ValueError for a regex RE2 refuses."""
        for op in ("=~", "!~", "!=", "="):
            if spec.startswith(op):
                value = spec[len(op) :]
                break
        else:
            op, value = "=", spec
        regex = compile_user_regex(value) if op in ("=~", "!~") else None
        return cls(name, op, value, regex)

    def matches(self, labels: Labels) -> bool:
        """Whether `labels` satisfy this matcher."""
        actual = dict(labels).get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.regex is not None
        hit = self.regex.fullmatch(actual) is not None
        return hit if self.op == "=~" else not hit


def compile_metric_patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern[str] | None]:
    """Split names from globs: exact names go in a set, globs into one regex."""
    names = frozenset(p for p in patterns if not _GLOB.search(p))
    globs = [translate(p) for p in patterns if _GLOB.search(p)]
    return names, (re.compile("|".join(f"(?:{g})" for g in globs)) if globs else None)


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the rules file, ready to evaluate."""

    name: str
    metrics: tuple[str, ...]
    condition: Condition
    matchers: tuple[LabelMatcher, ...] = ()
    consecutive: int = 1
    hold: float = 0.0
    keep_firing_for: float = 0.0
    severity: str = "warning"
    labels: Labels = ()
    annotations: tuple[tuple[str, Template], ...] = ()
    notify: tuple[str, ...] = ()
    _names: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    _glob: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    absent: Absent | None = field(default=None, init=False, compare=False, repr=False)
    """The absence condition, if this is an `absent` rule."""
    expr: Expr | None = field(default=None, init=False, compare=False, repr=False)
    """The expression, if this is an `expr` rule (judged per run across its series; `metrics` are its names)."""
    peers: Peers | None = field(default=None, init=False, compare=False, repr=False)
    """The condition, if this is a `peers` rule (judged per group of series: `alertd.rules.peers`)."""

    def __post_init__(self) -> None:
        names, glob = compile_metric_patterns(self.metrics)
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_glob", glob)
        object.__setattr__(self, "absent", self.condition if isinstance(self.condition, Absent) else None)
        object.__setattr__(self, "expr", self.condition if isinstance(self.condition, Expr) else None)
        object.__setattr__(self, "peers", self.condition if isinstance(self.condition, Peers) else None)

    def watches(self, key: SeriesKey) -> bool:
        """Whether this rule applies to the series `key`."""
        return self.watches_metric(key.metric) and all(m.matches(key.labels) for m in self.matchers)

    def watches_metric(self, metric: str) -> bool:
        """Whether this rule applies to some series of the metric `metric` (its labels aside)."""
        return metric in self._names or (self._glob is not None and self._glob.fullmatch(metric) is not None)
