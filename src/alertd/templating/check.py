"""The checks a parsed template passes at load, each refusal naming the template's line and column.

A recursive loop, `include`/`import`/`extends`, any attribute or item starting with `_`, an unknown filter,
test or name, and a call of a method outside the environment's short list are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from jinja2 import TemplateSyntaxError, meta, nodes

from alertd.templating.env import ALL_SAFE_METHODS, ENV
from alertd.templating.errors import CheckError
from alertd.templating.gospell import go_hint

_UNDERSCORE = "names starting with '_' are not allowed in a template"
_KNOWN_FILTERS = sorted(set(ENV.filters))
_KNOWN_TESTS = sorted(ENV.tests)
_ATTRIBUTE_FILTERS = ("attr", "map", "selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min", "max")


def syntax_message(e: TemplateSyntaxError, source: str) -> str:
    """Jinja's syntax error `e` about `source` (as written, before `translate`) as a CheckError's message."""
    return f"line {e.lineno or 1}: syntax error: {e.message}" + go_hint(source, e.message or "")


def check_tree(tree: nodes.Template, source: str, names: frozenset[str], hints: Mapping[str, str]) -> None:
    """Refuse (CheckError) what `tree`, parsed from `source`, may not do; `names` are its data names, and
    `hints` say what to write instead of a name that is not one."""
    for loop in tree.find_all(nodes.For):
        if loop.recursive:
            raise CheckError(f"{_find(source, loop.lineno, 'recursive')}: recursive loops are not available")
    for kind in (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends):
        for node in tree.find_all(kind):
            word = kind.__name__.lower().replace("fromimport", "from ... import")
            raise CheckError(
                f"{_find(source, node.lineno, word)}: '{{% {word} %}}' is not available: "
                "a template cannot load other templates or read files"
            )
    _check_private(tree, source)
    for f in tree.find_all(nodes.Filter):
        if f.name not in ENV.filters:
            where = _find(source, f.lineno, f.name)
            raise CheckError(f"{where}: unknown filter {f.name!r} (known: {', '.join(_KNOWN_FILTERS)})")
        _check_attribute_args(f, source)
    for t in tree.find_all(nodes.Test):
        if t.name not in ENV.tests:
            where = _find(source, t.lineno, t.name)
            raise CheckError(f"{where}: unknown test {t.name!r} (known: {', '.join(_KNOWN_TESTS)})")
        _check_attribute_args(t, source)
    known = names | set(ENV.globals)
    for name in sorted(meta.find_undeclared_variables(tree)):
        if name not in known:
            first = next(n.lineno for n in tree.find_all(nodes.Name) if n.name == name)
            why = hints.get(name) or f"known: {', '.join(sorted(names))}"
            raise CheckError(f"{_find(source, first, name)}: unknown name {name!r} ({why})")
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr not in ALL_SAFE_METHODS:
            where = _find(source, call.lineno, call.node.attr)
            hint = " (use printf(...) or the format filter)" if call.node.attr in ("format", "format_map") else ""
            raise CheckError(f"{where}: calling .{call.node.attr}() is not allowed in a template{hint}")


def _check_private(tree: nodes.Template, source: str) -> None:
    private = [(n.lineno, n.attr) for n in tree.find_all(nodes.Getattr) if n.attr.startswith("_")]
    private += [
        (n.lineno, n.arg.value)
        for n in tree.find_all(nodes.Getitem)
        if isinstance(n.arg, nodes.Const) and isinstance(n.arg.value, str) and n.arg.value.startswith("_")
    ]
    if private:  # the first in the text: `''.__class__.__mro__` names `__class__`
        places = sorted((_position(source, line, name), name) for line, name in private)
        (line, col), _ = places[0]
        raise CheckError(f"line {line}, column {col}: {_UNDERSCORE}")


def _check_attribute_args(node: nodes.Filter | nodes.Test, source: str) -> None:
    if node.name not in _ATTRIBUTE_FILTERS:
        return
    values = [kw.value for kw in node.kwargs if kw.key == "attribute"]
    if node.name in ("attr", "selectattr", "rejectattr") and node.args:
        values.append(node.args[0])
    for v in values:
        if isinstance(v, nodes.Const) and isinstance(v.value, str) and re.search(r"(^|\.)_", v.value):
            raise CheckError(f"{_find(source, node.lineno, node.name)}: {_UNDERSCORE}")


def _position(source: str, lineno: int, word: str) -> tuple[int, int]:
    """(line, column) of `word`'s first appearance on line `lineno` of `source` (column 1 if not found)."""
    lines = source.split("\n")
    text = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    m = re.search(rf"(?<![\w]){re.escape(word)}(?!\w)", text)
    return lineno, m.start() + 1 if m else 1


def _find(source: str, lineno: int, word: str) -> str:
    """`line N, column C` of `word`'s first appearance on line `lineno` of `source`."""
    line, col = _position(source, lineno, word)
    return f"line {line}, column {col}"
