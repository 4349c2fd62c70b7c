"""The one Jinja2 environment every alertd template compiles in: sandboxed, bounded, checked at load.

- `jinja2.sandbox.SandboxedEnvironment`, `StrictUndefined`, no autoescape (plain text: each chat format
  escapes what it sends) and no loader: `include`, `import`, `extends` are refused at load (`check`), so a
  template can never read a file.
- Prometheus spellings are translated before Jinja sees them (`gospell`).
- At load, `compiled.compile_template` refuses a syntax error, an unknown name, filter or test, any attribute
  or item starting with `_`, a call of a method outside a short list (`SAFE_METHODS`), a recursive loop and a
  template nested past the parser's depth, each with the template's line and column (`check`).
- At render, work is bounded (`bounds`): every loop iteration and every call spends one step of a per-render
  budget (MAX_STEPS), and the items filters, methods and operators go through are counted against MAX_WORK;
  `*`, `**`, `+`, `%` and `~` refuse results past MAX_STRING characters (or MAX_INT_BITS bits), before
  building them where the size is known; `range` is the sandbox's (at most 100,000); the output is cut at
  MAX_OUTPUT characters. The sandbox stays the last guard: `SecurityError` and every other render failure
  come back as `RenderError`.

Jinja2's undocumented hooks this needs are all in `jinja_compat`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context

from alertd.templating import funcs
from alertd.templating.bounds import (
    MAX_INT_BITS,
    MAX_STRING,
    bounded_concat,
    budget,
    check_replace,
    compare,
    loop_guard,
    sized,
    too_long,
)
from alertd.templating.filters import HEAVY, OWN_FILTERS, REMOVED_FILTERS, checked, finalize, format_text
from alertd.templating.jinja_compat import CompatSandbox, LoopContext, Macro
from alertd.templating.labels import LabelView

SAFE_METHODS: Mapping[type, frozenset[str]] = {
    str: frozenset(
        {
            *("startswith", "endswith", "strip", "lstrip", "rstrip", "lower", "upper", "split", "rsplit"),
            *("splitlines", "count", "find", "rfind", "index", "rindex", "isdigit", "isalpha", "isalnum"),
            *("isspace", "islower", "isupper", "isdecimal", "isnumeric", "capitalize", "casefold", "swapcase"),
            *("title", "partition", "rpartition", "removeprefix", "removesuffix", "replace"),
        }
    ),
    dict: frozenset({"items", "keys", "values", "get"}),
    list: frozenset({"index", "count"}),
    tuple: frozenset({"index", "count"}),
    LoopContext: frozenset({"cycle", "changed"}),
}
"""The methods a template may call, by the type of what they belong to."""
ALL_SAFE_METHODS = frozenset().union(*SAFE_METHODS.values())


class _Environment(CompatSandbox):
    """The sandbox with alertd's bounds (see the module doc)."""

    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})

    def __init__(self) -> None:
        super().__init__(
            autoescape=False,
            undefined=StrictUndefined,
            finalize=finalize,
            keep_trailing_newline=True,
            auto_reload=False,
            cache_size=0,
        )
        self.alertd_concat = bounded_concat
        self.alertd_compare = compare
        self.alertd_loop_guard = loop_guard
        for name in REMOVED_FILTERS:
            self.filters.pop(name, None)
        for name in ("lipsum", "cycler", "joiner"):
            self.globals.pop(name, None)
        self.filters.update(OWN_FILTERS)
        self.filters = {k: checked(v, HEAVY.get(k, 1)) for k, v in self.filters.items()}
        self.tests = {k: checked(cast(Callable[..., Any], v)) for k, v in self.tests.items()}
        self.globals.update({**funcs.FUNCTIONS, "printf": funcs.printf})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_STRING:
                    raise too_long("value")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if abs(left) > 1 and right * max(left.bit_length() - 1, 1) > MAX_INT_BITS:
                raise SecurityError(f"the template built a number larger than {MAX_INT_BITS} bits")
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            if len(left) + len(right) > MAX_STRING:
                raise too_long("value")
        elif operator == "%" and isinstance(left, str):
            result = format_text(left, *(right if isinstance(right, tuple) else (right,)))
            budget(context).handle(result)
            return result
        result = sized(self.binop_table[operator](left, right))
        budget(context).handle(result)
        return result

    def check_call(self, context: Context, obj: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        work = budget(context)
        work.spend()
        for arg in (*args, *kwargs.values()):
            work.handle(arg)
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", "")
        if owner is not None and not isinstance(obj, Macro):
            allowed = next((m for t, m in SAFE_METHODS.items() if isinstance(owner, t)), frozenset())
            if name not in allowed:
                raise SecurityError(f"calling .{name}() is not allowed in a template")
            work.handle(owner)
            if name == "replace" and isinstance(owner, str) and len(args) >= 2:
                check_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else None)

    def checked(self, value: Any) -> Any:
        return sized(value)

    def item_first(self, obj: Any, attribute: str) -> bool:
        return isinstance(obj, LabelView) and obj.item_first(attribute)


ENV = _Environment()
"""The one environment (stateless after construction: every render brings its own budget)."""
