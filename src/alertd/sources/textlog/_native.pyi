"""Types of the C module `_native.c` (the text-log fast path's loop)."""

from collections.abc import Callable, Sequence
from typing import Any

def setup(
    sample: type,
    step: object,
    ignored: object,
    dropped: object,
    ignored_keys: frozenset[str],
    epoch: Callable[[str, str | None], float | None],
    max_values: int,
    /,
) -> None: ...
def run(
    lines: Sequence[str],
    start: int,
    counter: int,
    last_step: int | None,
    last_time: float | None,
    known: dict[str, Any],
    classify: Callable[[str], object],
    rank: str | None,
    now: float,
    out: list[Any],
    /,
) -> tuple[int, int, int | None, float | None, int, int, str | None]: ...
def rank(text: str, /) -> tuple[str, int] | None: ...
def pairs(text: str, pos: int, /) -> list[tuple[str, str]]: ...
def dict_pairs(text: str, start: int, end: int, /) -> list[tuple[str, str]]: ...
