"""Wrapping methods of one framework object (a Trainer, a ModelCheckpoint) for a while, and putting them back.

The callbacks see what the frameworks hide by wrapping a few methods on the instance (never the class):
`set(obj, name, wrapper)` puts the wrapper in the instance's `__dict__`; `restore()` undoes every such
change, newest first, except where someone else replaced the wrapper meanwhile (theirs then stays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class Patches:
    """The instance methods one callback has wrapped, to put back."""

    def __init__(self) -> None:
        self._done: list[tuple[object, str, object, object]] = []

    def set(self, obj: object, name: str, value: Callable[..., Any]) -> None:
        """Make `value` the instance's `name` (its own attribute, over the class's method)."""
        previous = vars(obj).get(name, _MISSING)
        setattr(obj, name, value)
        self._done.append((obj, name, previous, value))

    def restore(self) -> None:
        """Put back what `set` replaced, newest first; a wrapper someone replaced since is left to them."""
        while self._done:
            obj, name, previous, value = self._done.pop()
            if vars(obj).get(name) is not value:
                continue  # replaced by someone else since: theirs now
            if previous is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, previous)
