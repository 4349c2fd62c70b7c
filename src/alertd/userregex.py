"""User-written regular expressions, matched in linear time (RE2, as Prometheus and Alertmanager do).

Python's `re` backtracks: `(a+)+$` against `aaaa...ab` takes exponential time, and a rules file or a
log line must never be able to freeze the service. RE2 has no backreferences and no look-arounds;
such a pattern is refused with RE2's own reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 8 << 20


class UserRegex(Protocol):
    """What alertd uses of a compiled RE2 pattern."""

    groupindex: Mapping[str, int]

    def search(self, text: str) -> Any: ...

    def match(self, text: str) -> Any: ...

    def fullmatch(self, text: str) -> Any: ...


def compile_user_regex(pattern: str) -> UserRegex:
    """A compiled RE2 pattern (`search`, `match`, `fullmatch`, `groupindex` as in `re`).

    Raise ValueError naming what RE2 can't do (backreferences, look-arounds, ...).
    """
    try:
        compiled: UserRegex = re2.compile(pattern, _OPTIONS)
        return compiled
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"invalid regex {pattern!r}: {reason} (RE2 syntax: no backreferences or look-arounds)"
        ) from None
