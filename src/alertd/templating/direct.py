"""Templates simple enough to render without Jinja's runtime: text, names, `labels.NAME`, and `{% if %}` on them.

Nearly every default rule's summary is of this kind ("{{ metric }} is {{ value }}{% if step is not none %} at step
{{ step }}{% endif %} in {{ labels.run }}"), and one is rendered for every transition: 2,000 alerts firing together
render 2,000 of them. Jinja's runtime (a context over the globals, a generator) is most of a render's 5 us. Such a
template is turned here into a list of steps that print what Jinja's compiled code prints, through the same
environment's `finalize` and `getattr` (so a float prints as alertd prints it, and a missing label prints
`<no value>` and is noted alike). Anything else (a filter, a call, an operator, a loop, a global, `elif`, ...) is
left to Jinja (`simple` gives None).

Steps: `str` (text as written), `(name, None)` (`{{ name }}`), `(name, attr)` (`{{ name.attr }}`), and
`_If` (a test on a name or `name.attr`: truthy, `is none` or `is not none`; its two branches are steps too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes

from alertd.templating.bounds import MAX_OUTPUT
from alertd.templating.env import ENV
from alertd.templating.filters import finalize

Ref = tuple[str, str | None]
"""A name, or a name and one attribute of it (`labels.run`)."""


@dataclass(frozen=True, slots=True)
class _If:
    ref: Ref
    test: str
    """"truthy", "none" or "not none"."""
    then: tuple[Step, ...]
    otherwise: tuple[Step, ...]


Step = str | Ref | _If


def simple(tree: nodes.Template, names: frozenset[str]) -> tuple[Step, ...] | None:
    """The steps that print what `tree` prints, where its every name is one of `names` (the data names its caller
    always gives); None where it is more than text, such names and tests on them."""
    return _steps(tree.body, names)


def _steps(body: list[nodes.Node], names: frozenset[str]) -> tuple[Step, ...] | None:
    out: list[Step] = []
    for node in body:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    out.append(child.data)
                else:
                    ref = _ref(child, names)
                    if ref is None:
                        return None
                    out.append(ref)
        elif isinstance(node, nodes.If) and not node.elif_:
            branch = _if(node, names)
            if branch is None:
                return None
            out.append(branch)
        else:
            return None
    return tuple(out)


def _if(node: nodes.If, names: frozenset[str]) -> _If | None:
    test, negate = node.test, False
    if isinstance(test, nodes.Not):
        test, negate = test.node, True
    if isinstance(test, nodes.Test):
        if test.name != "none" or test.args or test.kwargs or test.dyn_args or test.dyn_kwargs:
            return None
        kind, ref = ("not none" if negate else "none"), _ref(test.node, names)
    elif negate:
        return None
    else:
        kind, ref = "truthy", _ref(test, names)
    then, otherwise = _steps(node.body, names), _steps(node.else_, names)
    if ref is None or then is None or otherwise is None:
        return None
    return _If(ref, kind, then, otherwise)


def _ref(node: nodes.Node, names: frozenset[str]) -> Ref | None:
    if isinstance(node, nodes.Name) and node.ctx == "load" and node.name in names:
        return node.name, None
    if isinstance(node, nodes.Getattr) and node.ctx == "load":
        inner = node.node
        if isinstance(inner, nodes.Name) and inner.ctx == "load" and inner.name in names:
            return inner.name, node.attr
    return None


def render(steps: tuple[Step, ...], data: Mapping[str, Any]) -> str:
    """What Jinja prints for the template of `steps` over `data` (every name the steps read is in it), cut at
    MAX_OUTPUT characters as `Compiled.render` cuts it (no piece past the cut is made)."""
    out: list[str] = []
    if _print(steps, data, out, 0) > MAX_OUTPUT:
        return "".join(out)[: MAX_OUTPUT - 1] + "…"
    return "".join(out)


def _print(steps: tuple[Step, ...], data: Mapping[str, Any], out: list[str], size: int) -> int:
    """Print `steps` into `out`; the size printed, or the first past MAX_OUTPUT (where printing stopped)."""
    for step in steps:
        if type(step) is str:
            piece = step
        elif type(step) is tuple:
            piece = str(finalize(_value(step, data)))
        else:
            assert isinstance(step, _If)
            value = _value(step.ref, data)
            holds = bool(value) if step.test == "truthy" else (value is None) == (step.test == "none")
            size = _print(step.then if holds else step.otherwise, data, out, size)
            if size > MAX_OUTPUT:
                return size
            continue
        out.append(piece)
        size += len(piece)
        if size > MAX_OUTPUT:
            return size
    return size


def _value(ref: Ref, data: Mapping[str, Any]) -> Any:
    name, attr = ref
    value = data[name]
    return value if attr is None else ENV.getattr(value, attr)
