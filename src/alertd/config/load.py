"""The rules files: `load_config(paths)` returns a `Config` whose rules are core `Rule` objects, or raises
`ConfigError` listing every problem of every file, each with its place (`rules[3].condition`) and line.

Each file is read (`alertd.yamlfile`), validated (`config.validate`), then the files are merged and checked
together (`config.merge`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alertd.config.compiled import Config
from alertd.config.merge import _merge
from alertd.config.rulesfile import RulesFile
from alertd.config.validate import _validate
from alertd.errors import ConfigError, Problem
from alertd.yamlfile import Document, load_yaml


def load_config(paths: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Load, validate, merge and compile the rules files; raise ConfigError listing every problem."""
    problems: list[Problem] = []
    parsed: list[tuple[Document, RulesFile]] = []
    for path in paths:
        try:
            doc = load_yaml(path, env, keep_going=True)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        problems.extend(doc.problems)  # an unset variable, a duplicate key: reported with the schema's problems
        model = _validate(doc, problems, frozenset(p.place for p in doc.problems))
        if model is not None and not doc.problems:
            parsed.append((doc, model))
    if problems:
        raise ConfigError(problems)
    return _merge(parsed, tuple(paths))
