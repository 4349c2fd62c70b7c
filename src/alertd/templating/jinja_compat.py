"""Every use alertd makes of Jinja2's private or undocumented API, in one module, written against `TESTED`.

The bounds on a template (see `env`) need hooks Jinja2 does not document. Each is used here and nowhere else,
and `tests/core/test_jinja_version.py` checks that the installed Jinja2 is inside `TESTED` and that every name
below still exists with the shape relied on (`RELIED_ON`), so that a Jinja2 upgrade fails that test with a
clear message rather than quietly changing what a template may do.

- `jinja2.compiler.CodeGenerator`, `Frame` and the `optimizeconst` decorator: `BoundedCodeGenerator`
  overrides `visit_Concat` (`a ~ b`) and `visit_Compare` (`a in b`, `a == b`) to emit calls of the
  environment's `alertd_concat` and `alertd_compare`, with `write` and `visit` and the generated code's locals
  `environment` and `context`. The documented operator hooks (`intercepted_binops`) cover arithmetic only.
- `jinja2.utils._PassArg` (`from_obj`; `context`, `eval_context`, `environment`): what a filter or test marked
  `pass_context`, `pass_eval_context` or `pass_environment` takes first, so that a wrapper counting its work
  can hand that on (`passed_first`).
- `jinja2.runtime.Context(environment, parent, name, blocks)` made by hand, with `Template.root_render_func`
  and `Template.blocks`: a render over a plain dict (the globals merged once at compile, the budget under a
  key no template can name) as a stream that can be cut at MAX_OUTPUT (`render_stream`); `Template.generate`
  would copy the template's globals (a ChainMap over the environment's) every render and rewrite every
  failure's traceback.
- `SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)` and `.getattr(obj, attribute)`, the
  sandbox's call of everything a template calls and its `a.b`: `CompatSandbox` overrides them and hands
  alertd's checks to `check_call`, `checked` and `item_first`.
- `SandboxedEnvironment.wrap_str_format(value)` (Jinja2 3.1.5 and later: the fix for indirect `str.format`
  calls, GHSA-q2x7-8rv6-6q7h): overridden to refuse `str.format` and `str.format_map` outright.
- `jinja2.runtime.LoopContext` and `Macro` (undocumented classes): `loop` may call `cycle` and `changed`, and
  a macro is not a method call (`env`'s allowed methods); `jinja2.filters.FILTERS` (`DEFAULT_FILTERS`): Jinja's
  own `indent`, which `filters` bounds.

`guard_loops` uses only the documented node API (`nodes.EnvironmentAttribute`), but lives here beside the code
generator because the hook names the compiled code calls (`alertd_concat`, `alertd_compare`,
`alertd_loop_guard`) belong together; `CompatSandbox` declares them and `env` sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.environment import Template
from jinja2.exceptions import SecurityError
from jinja2.filters import FILTERS
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import _PassArg

TESTED = (">=3.1.5", "<3.2")
"""The Jinja2 versions this module was written and tested against (pyproject.toml's bound says the same)."""

RELIED_ON: Mapping[str, tuple[str, ...]] = {
    "jinja2.compiler.CodeGenerator": (
        "visit_Concat(self, node, frame)",
        "visit_Compare(self, node, frame)",
        "write(self, x)",
        "visit(self, node, *args, **kwargs)",
    ),
    "jinja2.compiler.Frame": (),
    "jinja2.compiler.optimizeconst": (),
    "jinja2.utils._PassArg": ("from_obj(obj)", "context", "eval_context", "environment"),
    "jinja2.runtime.Context": ("__init__(self, environment, parent, name, blocks, globals)", "eval_ctx", "environment"),
    "jinja2.environment.Template": ("root_render_func", "blocks", "name", "environment"),
    "jinja2.sandbox.SandboxedEnvironment": (
        "call(__self, __context, __obj, *args, **kwargs)",
        "getattr(self, obj, attribute)",
        "wrap_str_format(self, value)",
        "code_generator_class",
    ),
    "jinja2.runtime.LoopContext": ("cycle(self, *args)", "changed(self, *value)"),
    "jinja2.runtime.Macro": (),
    "jinja2.filters.FILTERS": ("indent",),
}
"""Each private or undocumented name used here and what of it is relied on: a member, or a method with its
parameters (on an instance for `Template` and `Context`, whose attributes are set per instance; a key for a dict)."""

DEFAULT_FILTERS: Mapping[str, Callable[..., Any]] = FILTERS
"""Jinja2's own filters, before alertd's replace or bound them."""

__all__ = [
    "DEFAULT_FILTERS",
    "RELIED_ON",
    "TESTED",
    "BoundedCodeGenerator",
    "CompatSandbox",
    "LoopContext",
    "Macro",
    "guard_loops",
    "passed_first",
    "render_stream",
]


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with `~` (Concat) and comparisons routed through the environment's bounded hooks."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.alertd_concat(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    @optimizeconst
    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        """`a in b`, `a == b`: through `alertd_compare`, which counts a container's items as work."""
        self.write("environment.alertd_compare(context, ")
        self.visit(node.expr, frame)
        self.write(", (")
        for op in node.ops:
            self.write(f"({op.op!r}, ")
            self.visit(op.expr, frame)
            self.write("), ")
        self.write("))")


def guard_loops(tree: nodes.Template) -> None:
    """Route every `{% for %}`'s iterable through the environment's `alertd_loop_guard` (one step an item)."""
    for node in tree.find_all(nodes.For):
        node.iter = nodes.Call(nodes.EnvironmentAttribute("alertd_loop_guard"), [node.iter], [], None, None)


class CompatSandbox(SandboxedEnvironment):
    """The sandbox with the hooks its compiled code calls (`BoundedCodeGenerator`, `guard_loops`), str.format
    refused, and its undocumented call and attribute hooks handed to `check_call`, `checked` and `item_first`."""

    code_generator_class = BoundedCodeGenerator
    alertd_concat: Callable[[Context, Iterable[Any]], str]
    alertd_compare: Callable[[Context, Any, tuple[tuple[str, Any], ...]], Any]
    alertd_loop_guard: Callable[..., Iterator[Any]]

    def check_call(self, context: Context, obj: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Refuse (SecurityError) a call a template makes, before the sandbox's own checks; allows all here."""

    def checked(self, value: Any) -> Any:
        """A call's result, or SecurityError if it may not be kept; keeps all here."""
        return value

    def item_first(self, obj: Any, attribute: str) -> bool:
        """Whether `obj.attribute` in a template means `obj[attribute]` before any attribute; never here."""
        return False

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.check_call(__context, __obj, args, kwargs)
        return __self.checked(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        if self.item_first(obj, attribute):
            return obj[attribute]
        return super().getattr(obj, attribute)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if getattr(value, "__name__", "") in ("format", "format_map") and isinstance(
            getattr(value, "__self__", None), str
        ):

            def refused(*args: Any, **kwargs: Any) -> str:
                raise SecurityError("str.format is not available: use printf(...) or the format filter")

            return refused
        return None


def passed_first(func: Callable[..., Any]) -> Callable[[Context], Any] | None:
    """What `func` (a filter or test) takes before its value, from a render's context: the context itself, its
    eval context or its environment for Jinja's `pass_context`, `pass_eval_context`, `pass_environment`; None
    for a plain function, which takes its value first."""
    mark = _PassArg.from_obj(func)
    if mark is _PassArg.context:
        return lambda context: context
    if mark is _PassArg.eval_context:
        return attrgetter("eval_ctx")
    if mark is _PassArg.environment:
        return attrgetter("environment")
    return None


def render_stream(template: Template, parent: dict[str, Any]) -> Iterator[str]:
    """The pieces of `template`'s output over `parent` (every name the render sees, globals included)."""
    context = Context(template.environment, parent, template.name, template.blocks)
    return template.root_render_func(context)
