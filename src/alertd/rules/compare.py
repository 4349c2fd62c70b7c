"""The comparison operators of the rules file (`>`, `>=`, `<`, `<=`, `==`, `!=`)."""

from __future__ import annotations

import operator
from collections.abc import Callable

OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
