"""Messages that help with a mistyped rules file: the model a place of the file is read into, its keys, and the
nearest known word (`did you mean 'tensorboard'?`).

The lists come from the models themselves (their fields, the `Literal` tags of a discriminated union), so a new
key or source type is offered without anyone editing a list here.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

KEY_HINTS = {
    "threshold": ("condition", "a threshold is a condition: `condition: '> 100'`"),
    "expr": ("condition", "an expression is a condition: `condition: {expr: 'a > b'}`"),
    "expression": ("condition", "an expression is a condition: `condition: {expr: 'a > b'}`"),
    "duration": ("for", "how long the condition must hold is `for: 5m`"),
    "receiver": ("notify", "a rule names its notifiers in `notify: [slack]`"),
}
"""Keys of other tools that alertd spells otherwise, offered when a rule has one (or a near miss of one)."""


def nearest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known word closest to `word` (difflib's ratio at least `cutoff`), or None."""
    choices = sorted(set(known) - {word})
    hits = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
    return hits[0] if hits else None


def did_you_mean(word: str, known: Iterable[str], cutoff: float = 0.6) -> str:
    """`; did you mean 'x'?` or an empty string."""
    hit = nearest(word, known, cutoff)
    return f"; did you mean {hit!r}?" if hit else ""


def one_of(known: Iterable[str]) -> str:
    """`'a', 'b' or 'c'`."""
    words = [repr(w) for w in known]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def unknown_word(what: str, word: object, known: Sequence[str]) -> str:
    """`unknown source type 'tensorbord'; did you mean 'tensorboard'? (one of 'csv', ... or 'wandb')`."""
    text = str(word)[:100]
    return f"unknown {what} {text!r}{did_you_mean(text, known)} (one of {one_of(known)})"


def unknown_key(key: str, model: type[BaseModel] | None) -> str:
    """The message of a key the model at its place has no field for, with the nearest field and the fields."""
    key = str(key)[:100]
    if model is None:
        return f"unknown key {key!r}"
    fields = sorted(f.alias or name for name, f in model.model_fields.items())
    hit = nearest(key, [*fields, *(k for k in KEY_HINTS if KEY_HINTS[k][0] in fields)], 0.75)
    hint, why = "", ""
    if hit in KEY_HINTS:
        target, why = KEY_HINTS[hit]
        hint, why = f"; did you mean {target!r}?", f"{why}; "
    elif hit is not None:
        hint = f"; did you mean {hit!r}?"
    return f"unknown key {key!r}{hint} ({why}the keys here: {', '.join(fields)})"


def union_tags(annotation: Any) -> list[str]:
    """The `type:` values a discriminated union of models accepts, in declaration order."""
    out: list[str] = []
    for member in _members(annotation):
        field = member.model_fields.get("type")
        if field is not None:
            out += [str(a) for a in get_args(field.annotation) if isinstance(a, str)]
    return out


def model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model a pydantic error location (`('sources', 2, 'tensorboard', 'treshold')`) is inside: the one
    whose field the last element would be; None when the place is not a model's."""
    current: Any = root
    for elem in loc[:-1]:
        current = _step(current, elem)
        if current is None:
            return None
    model = _unwrap(current)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _step(current: Any, elem: str | int) -> Any:
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        for name, f in current.model_fields.items():
            if elem in (name, f.alias):
                return f.annotation
        return None
    origin = get_origin(current)
    args = get_args(current)
    if origin in (list, tuple) and args and isinstance(elem, int):
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    members = _members(current)
    if members:  # a union: the tag (`'tensorboard'`) or a member's name picks the member
        for m in members:
            field = m.model_fields.get("type")
            tags = get_args(field.annotation) if field is not None else ()
            if elem in tags or elem == m.__name__:
                return m
        models = [m for m in members if elem in m.model_fields]
        return _step(models[0], elem) if len(models) == 1 else None
    return None


def _unwrap(annotation: Any) -> Any:
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
            continue
        if _is_union(annotation):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation


def _members(annotation: Any) -> list[type[BaseModel]]:
    annotation = _unwrap(annotation)
    if not _is_union(annotation):
        return []
    return [a for a in (_unwrap(x) for x in get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)
