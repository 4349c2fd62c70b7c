"""What one render may do: steps, work and the size of what it builds (each past its bound is a SecurityError).

Every loop iteration and every call spends one step of a per-render budget (MAX_STEPS), and the items filters,
methods and operators go through are counted against MAX_WORK; strings, lists and numbers past MAX_STRING
characters (or MAX_INT_BITS bits) are refused, before they are built where the size is known. The budget
travels in the render's context under a key no template can name, so a template rendered by anything but
`Compiled.render` is refused.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context

MAX_OUTPUT = 16_384
"""Characters one rendered template may have; the rest is cut (with `…`)."""
MAX_STRING = 65_536
"""The longest string or list any operation may build while rendering."""
MAX_INT_BITS = 4_096
"""The largest integer (in bits) arithmetic may build while rendering."""
MAX_STEPS = 20_000
"""Loop iterations and calls one render may make."""
MAX_WORK = 1_000_000
"""Items (characters, list entries) the filters, methods and operators of one render may go through."""

BUDGET_KEY = "alertd budget"
"""Where a render's Budget is in its context: a key no template can name (it has a space)."""


class Budget:
    """What one render may still do: steps (loop iterations, calls) and work (items filters and operators handle)."""

    __slots__ = ("left", "work")

    def __init__(self) -> None:
        self.left = MAX_STEPS
        self.work = MAX_WORK

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise SecurityError(f"the template ran more than {MAX_STEPS} loop iterations and calls")

    def handle(self, value: Any) -> None:
        """Count the items of `value` (a string's characters, a list's entries) as work done."""
        self.work -= len(value) if isinstance(value, str | list | tuple | dict | set | range) else 1
        if self.work < 0:
            raise SecurityError(f"the template handled more than {MAX_WORK} items")


def budget(context: Context) -> Budget:
    """The budget of the render `context` belongs to; SecurityError if it has none (not rendered by alertd)."""
    found = context.parent.get(BUDGET_KEY)
    if not isinstance(found, Budget):
        raise SecurityError("a template may only be rendered by alertd")
    return found


@pass_context
def loop_guard(context: Context, iterable: Iterable[Any]) -> Iterator[Any]:
    """A loop's items, one step each."""
    steps = budget(context)
    for item in iterable:
        steps.spend()
        yield item


def sized(value: Any) -> Any:
    """`value`, or SecurityError if it is a string, list or number past the bounds."""
    if isinstance(value, str | list | tuple | dict) and len(value) > MAX_STRING:
        raise SecurityError(f"the template built a value longer than {MAX_STRING}")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError(f"the template built a number larger than {MAX_INT_BITS} bits")
    return value


def too_long(what: str = "string") -> SecurityError:
    return SecurityError(f"the template built a {what} longer than {MAX_STRING}")


def bounded_concat(context: Context, parts: Iterable[Any]) -> str:
    """`a ~ b ~ c`, refused before joining past MAX_STRING."""
    texts = [str(p) for p in parts]
    if sum(len(t) for t in texts) > MAX_STRING:
        raise too_long()
    text = "".join(texts)
    budget(context).handle(text)
    return text


_COMPARE: Mapping[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}


def compare(context: Context, left: Any, ops: tuple[tuple[str, Any], ...]) -> Any:
    """A (chained) comparison, counting the items of the containers it looks through."""
    work = budget(context)
    result: Any = True
    for op, right in ops:
        work.handle(right)
        if op not in ("in", "notin"):
            work.handle(left)
        result = _COMPARE[op](left, right)
        if not result:
            return result
        left = right
    return result


def check_replace(text: str, old: str, new: str, count: int | None) -> None:
    """Refuse `text.replace(old, new, count)` before building it if the result would be past MAX_STRING."""
    hits = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        hits = min(hits, count)
    if len(text) + hits * (len(new) - len(old)) > MAX_STRING:
        raise too_long()


def check_width(width: Any) -> None:
    """Refuse a padding width past MAX_STRING."""
    if isinstance(width, int) and width > MAX_STRING:
        raise SecurityError(f"a width over {MAX_STRING} is not allowed")


def interleave(items: Iterable[str], sep: str) -> Iterator[str]:
    """`items` with `sep` between them, refused once their total passes MAX_STRING."""
    total = 0
    for i, item in enumerate(items):
        if i:
            yield sep
        total += len(item) + len(sep)
        if total > MAX_STRING:
            raise too_long()
        yield item
