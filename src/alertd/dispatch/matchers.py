"""Label matchers and silences, as in Alertmanager (pure: no I/O, no clock reads).

An alert is matched on its labels plus three it carries by nature: `alertname` (the rule's name, as the
webhook body and the fingerprint have it), `severity` (the rule's) and `rule` (the same as `alertname`).
A label the alert lacks has the value "" for matching, so `team!="ml"` matches an alert with no `team`
label, as in Alertmanager.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from alertd.model import Labels, am_labels
from alertd.userregex import UserRegex, compile_user_regex

_MATCHER = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:.]*)\s*(=~|=|!=|!~)\s*(.*?)\s*$", re.DOTALL)


class MatchOp(enum.Enum):
    """The four matcher operators: equal, not equal, regex match, regex non-match."""

    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@lru_cache(maxsize=1024)
def compile_anchored(pattern: str) -> UserRegex:
    """Compile `pattern` (RE2: linear time, as Alertmanager) so that it must match the whole value."""
    return compile_user_regex(f"^(?:{pattern})$")


@dataclass(frozen=True, slots=True)
class Matcher:
    """`name op value`; regexes are anchored: `run=~"exp.*"` matches `exp1`, not `old-exp1`."""

    name: str
    op: MatchOp
    value: str

    def __post_init__(self) -> None:
        if self.op in (MatchOp.RE, MatchOp.NRE):
            try:
                compile_anchored(self.value)
            except ValueError as exc:
                raise ValueError(f"matcher {self.name}{self.op.value}{self.value!r}: {exc}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether the labels satisfy this matcher; a missing label counts as ""."""
        got = labels.get(self.name, "")
        if self.op is MatchOp.EQ:
            return got == self.value
        if self.op is MatchOp.NE:
            return got != self.value
        hit = compile_anchored(self.value).match(got) is not None
        return hit if self.op is MatchOp.RE else not hit

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """Parse one matcher as Alertmanager does (`pkg/labels/parse.go`): `name=value`, `name!="value"`,
        `name=~regex`, `name!~"regex"`; in a value `\\"`, `\\\\` and `\\n` are escapes, any other
        backslash is itself, and a double quote must be escaped unless it closes a quoted value."""
        m = _MATCHER.match(text)
        if m is None:
            raise ValueError(f'bad matcher {text!r}: expected a matcher such as severity="critical" or run=~"exp.*"')
        return cls(m.group(1), MatchOp(m.group(2)), _unescape(m.group(3), text))

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op.value}"{escaped}"'


def _unescape(raw: str, text: str) -> str:
    quoted = raw.startswith('"')
    if quoted:
        raw = raw[1:]
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i < len(raw) - 1:
            nxt = raw[i + 1]
            out.append("\n" if nxt == "n" else nxt if nxt in '"\\' else "\\" + nxt)
            i += 2
            continue
        if c == '"':
            if not quoted or i < len(raw) - 1:
                raise ValueError(f"bad matcher {text!r}: the value has an unescaped double quote")
            quoted = False
        else:
            out.append(c)
        i += 1
    if quoted:
        raise ValueError(f"bad matcher {text!r}: the value's closing double quote is missing")
    return "".join(out)


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """Alertmanager's `ParseMatchers`: one or more comma-separated matchers, optionally in `{...}`
    (`{severity="critical", run=~"exp.*"}`); commas inside quotes belong to the value."""
    body = text.strip()
    body = body.removeprefix("{").removesuffix("}")
    tokens: list[str] = []
    token: list[str] = []
    inside = escaped = False
    for c in body:
        if c == "," and not inside:
            tokens.append("".join(token))
            token = []
            continue
        if c == '"':
            if not escaped:
                inside = not inside
            else:
                escaped = False
        elif c == "\\":
            escaped = not escaped
        else:
            escaped = False
        token.append(c)
    if "".join(token).strip():
        tokens.append("".join(token))
    return tuple(Matcher.parse(t) for t in tokens)


def matches_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    """True when every matcher matches (an empty list matches everything)."""
    return all(m.matches(labels) for m in matchers)


def equality_matchers(match: Mapping[str, str], match_re: Mapping[str, str] | None = None) -> tuple[Matcher, ...]:
    """Matchers from the rules file's `match` (equality) and `match_re` (anchored regex) maps."""
    out = [Matcher(k, MatchOp.EQ, v) for k, v in sorted(match.items())]
    out += [Matcher(k, MatchOp.RE, v) for k, v in sorted((match_re or {}).items())]
    return tuple(out)


def alert_label_map(rule: str, labels: Labels, severity: str) -> dict[str, str]:
    """The labels an alert is matched on: Alertmanager's (`alertd.model.am_labels`: its own, `alertname`
    and `severity`) plus `rule`, the same as `alertname`."""
    out = dict(am_labels(rule, labels, severity))
    out.setdefault("rule", rule)
    return out


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes every alert that all `matchers` match while `starts_at <= now < ends_at`."""

    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""

    def __post_init__(self) -> None:
        if not self.matchers:
            raise ValueError(f"silence {self.id}: needs at least one matcher")
        if self.ends_at < self.starts_at:
            raise ValueError(f"silence {self.id}: ends_at must not be before starts_at")

    def is_active(self, now: float) -> bool:
        """Whether the silence mutes alerts at `now`."""
        return self.starts_at <= now < self.ends_at

    def state(self, now: float) -> str:
        """`pending` (not started), `active` or `expired`, as Alertmanager reports it."""
        if now < self.starts_at:
            return "pending"
        return "active" if now < self.ends_at else "expired"

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether this silence's matchers all match `labels` (ignores time)."""
        return matches_all(self.matchers, labels)
