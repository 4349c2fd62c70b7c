"""One rules file's schema: its model (`RulesFile`), or its problems, each with its place, line and a message
that helps (the nearest key, the source and notifier types known)."""

from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import ValidationError

from alertd.config.conditions import ConditionError
from alertd.config.hints import model_at, union_tags, unknown_key, unknown_word
from alertd.config.rulesfile import RulesFile
from alertd.errors import Problem
from alertd.yamlfile import Document


def _validate(doc: Document, problems: list[Problem], skip: frozenset[str] = frozenset()) -> RulesFile | None:
    """The file's model, or None with its problems added. None at or around a place in `skip`: a value that
    an unset variable emptied is reported once, as the variable (not again as the empty value, nor as the
    check of its entry that the empty value failed)."""
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        problems.append(Problem(doc.file, "", "the file must be a mapping with sources, notifiers, route and rules"))
        return None
    try:
        return RulesFile.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
                loc = (*loc, "type")
            for at, message in _problems(err):
                place, line = doc.line_of((*loc, *at))
                if _under(place, skip) or (_entry_check(err) and _inside(doc.line_of(loc, in_file=True)[0], skip)):
                    continue
                problems.append(Problem(doc.file, place, message, line))
        return None


def _problems(err: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """The error's problems, each at its place below the error's location: a condition's own (`spike.ratio`)."""
    cause = err.get("ctx", {}).get("error")
    if err["type"] == "value_error" and isinstance(cause, ConditionError):
        return cause.problems
    return [((), _message(err))]


def _entry_check(err: Any) -> bool:
    """Whether the error is an entry's own check (a model validator), not one of its keys'."""
    return bool(err["type"] == "value_error")


def _under(place: str, places: frozenset[str]) -> bool:
    """Whether `place` is one of `places` or inside one (`metric[0]` inside `metric`)."""
    return place in places or any(place.startswith((f"{p}.", f"{p}[")) for p in places)


def _inside(place: str, places: frozenset[str]) -> bool:
    """Whether one of `places` is inside `place`."""
    return any(p.startswith((f"{place}.", f"{place}[")) for p in places)


_TAGGED = {"sources": "source type", "notifiers": "notifier type"}


def _message(err: Any) -> str:
    loc = tuple(err["loc"])
    what = _TAGGED.get(str(loc[0]), "type") if loc else "type"
    if err["type"] == "extra_forbidden":
        return unknown_key(str(loc[-1]), model_at(RulesFile, loc))
    if err["type"] == "union_tag_invalid":
        known = re.findall(r"'([^']*)'", str(err["ctx"]["expected_tags"]))
        return unknown_word(what, err["ctx"]["tag"], known)
    if err["type"] == "list_type" and loc and loc[-1] in ("matchers", "source_matchers", "target_matchers"):
        return "expected a list of matchers such as ['severity=\"critical\"']; a mapping is written under match:"
    if err["type"] == "union_tag_not_found":
        known = union_tags(_annotation_at(loc)) if loc else []
        return f"`type:` is missing: give the {what}" + (f" (one of {', '.join(known)})" if known else "")
    msg = str(err["msg"])
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def _annotation_at(loc: tuple[str | int, ...]) -> Any:
    """The annotation of the list or mapping items at loc[0] (`sources`, `notifiers`)."""
    field = RulesFile.model_fields.get(str(loc[0]))
    return get_args(field.annotation)[-1] if field is not None and get_args(field.annotation) else None
