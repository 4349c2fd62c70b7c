"""Problems at a place of a parsed rules file: its readable place (`rules[3].condition`) and line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alertd.errors import Problem
from alertd.yamlfile import Document


def problem_at(doc: Document, loc: tuple[str | int, ...], message: str) -> Problem:
    """The problem `message` at the pydantic location `loc` of `doc`, with its place and line."""
    place, line = doc.line_of(loc)
    return Problem(doc.file, place, message, line)


def doc_named(parsed: Sequence[tuple[Document, Any]], file: str) -> Document:
    """The parsed document of `file`."""
    return next(d for d, _ in parsed if d.file == file)
