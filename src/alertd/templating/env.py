"""The one Jinja2 environment every alertd template compiles in: sandboxed, bounded, checked at load.

- `jinja2.sandbox.SandboxedEnvironment`, `StrictUndefined`, no autoescape (plain text: each chat format
  escapes what it sends) and no loader: `include`, `import`, `extends` are refused at load, so a
  template can never read a file.
- Prometheus spellings are translated before Jinja sees them: `$labels.x` and `.Labels.x` become
  `labels.x`/`Labels.x`, and a Go call `humanize $value` becomes `humanize(value)`. Other Go syntax
  (`{{ range }}`, `{{ if }}`, `{{ end }}`) is a clear error suggesting the Jinja spelling.
- At load, `compile_template` refuses a syntax error, an unknown name, filter or test, any attribute or
  item starting with `_`, a call of a method outside a short list, a recursive loop and a template
  nested past the parser's depth, each with the template's line and column.
- At render, work is bounded: every loop iteration and every call spends one step of a per-render
  budget (MAX_STEPS), and the items filters, methods and operators go through are counted against
  MAX_WORK; `*`, `**`, `+`, `%` and `~` refuse results past MAX_STRING characters (or MAX_INT_BITS
  bits), before building them where the size is known; `range` is the sandbox's (at most 100,000); the
  output is cut at MAX_OUTPUT characters. The sandbox stays the last guard: `SecurityError` and every
  other render failure come back as `RenderError`.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, meta, nodes, pass_context
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.environment import Template
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.filters import FILTERS as DEFAULT_FILTERS
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.sandbox import SandboxedEnvironment
from jinja2.tests import TESTS as DEFAULT_TESTS
from jinja2.utils import _PassArg

from alertd.templating import funcs

MAX_OUTPUT = 16_384
"""Characters one rendered template may have; the rest is cut (with `…`)."""
MAX_STRING = 65_536
"""The longest string or list any operation may build while rendering."""
MAX_INT_BITS = 4_096
"""The largest integer (in bits) arithmetic may build while rendering."""
MAX_STEPS = 20_000
"""Loop iterations and calls one render may make."""
MAX_WORK = 1_000_000
"""Items (characters, list entries) the filters, methods and operators of one render may go through."""
MISSING = "<no value>"
"""What a missing label (or a missing value) renders as: Go templates' own text."""

_BUDGET = "alertd budget"  # a key no template can name (it has a space)
_GO_FUNCS = (*funcs.FUNCTIONS, "printf")

_SAFE_METHODS: Mapping[type, frozenset[str]] = {
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
_ALL_SAFE_METHODS = frozenset().union(*_SAFE_METHODS.values())
_LABEL_METHODS = frozenset({"items", "keys", "values", "get"})
_REMOVED_FILTERS = ("random", "lipsum", "urlize")
_ATTRIBUTE_FILTERS = ("attr", "map", "selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min", "max")


class RenderError(Exception):
    """A template failed while rendering (a missing name, a refused operation, a bad value)."""


class CheckError(ValueError):
    """A template refused at load: the message names the template's line and column."""


class _Budget:
    """What one render may still do: steps (loop iterations, calls) and work (items filters and operators handle)."""

    __slots__ = ("left", "work")

    def __init__(self) -> None:
        self.left = MAX_STEPS
        self.work = MAX_WORK

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise SecurityError(f"the template ran more than {MAX_STEPS} loop iterations and calls")

    def handle(self, value: Any) -> None:
        """Count the items of `value` (a string's characters, a list's entries) as work done."""
        self.work -= len(value) if isinstance(value, str | list | tuple | dict | set | range) else 1
        if self.work < 0:
            raise SecurityError(f"the template handled more than {MAX_WORK} items")


def _budget(context: Context) -> _Budget:
    budget = context.parent.get(_BUDGET)
    if not isinstance(budget, _Budget):
        raise SecurityError("a template may only be rendered by alertd")
    return budget


@pass_context
def _loop_guard(context: Context, iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _budget(context)
    for item in iterable:
        budget.spend()
        yield item


def _sized(value: Any) -> Any:
    if isinstance(value, str | list | tuple | dict) and len(value) > MAX_STRING:
        raise SecurityError(f"the template built a value longer than {MAX_STRING}")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError(f"the template built a number larger than {MAX_INT_BITS} bits")
    return value


def _bounded_concat(context: Context, parts: Iterable[Any]) -> str:
    texts = [str(p) for p in parts]
    if sum(len(t) for t in texts) > MAX_STRING:
        raise SecurityError(f"the template built a string longer than {MAX_STRING}")
    text = "".join(texts)
    _budget(context).handle(text)
    return text


class _Codegen(CodeGenerator):
    """Jinja's code generator with `~` (Concat) routed through a bounded join."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.alertd_concat(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    @optimizeconst
    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        """`a in b`, `a == b`: through `_compare`, which counts a container's items as work."""
        self.write("environment.alertd_compare(context, ")
        self.visit(node.expr, frame)
        self.write(", (")
        for op in node.ops:
            self.write(f"({op.op!r}, ")
            self.visit(op.expr, frame)
            self.write("), ")
        self.write("))")


_COMPARE: Mapping[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}


def _compare(context: Context, left: Any, ops: tuple[tuple[str, Any], ...]) -> Any:
    """A (chained) comparison, counting the items of the containers it looks through."""
    budget = _budget(context)
    result: Any = True
    for op, right in ops:
        budget.handle(right)
        if op not in ("in", "notin"):
            budget.handle(left)
        result = _COMPARE[op](left, right)
        if not result:
            return result
        left = right
    return result


class _Fixed(float):
    """A number rounded by `round(N)`: prints with exactly N decimals (`3.10`), computes as a float."""

    digits: int

    def __new__(cls, value: float, digits: int) -> _Fixed:
        self = super().__new__(cls, value)
        self.digits = digits
        return self

    def __str__(self) -> str:
        return f"{float(self):.{self.digits}f}"


def number_text(value: float) -> str:
    """A float as alertd prints it: 6 significant digits, `NaN`, `+Inf`, `-Inf`."""
    return str(value) if isinstance(value, _Fixed) else funcs.go_g(value, 6)


def _finalize(value: Any) -> Any:
    if isinstance(value, float):
        return number_text(value)
    if value is None:
        return MISSING
    return value


def _text(value: Any) -> str:
    return number_text(value) if isinstance(value, float) else str(_finalize(value))


def _round(value: Any, precision: int = 0, method: str = "common") -> Any:
    if isinstance(value, float) and math.isfinite(value) and 0 <= precision <= 20:
        return _Fixed(round(value, precision), precision)
    return value


def _upper(value: Any) -> str:
    return _text(value).upper()


def _lower(value: Any) -> str:
    return _text(value).lower()


def _replace(value: Any, old: Any, new: Any, count: int | None = None) -> str:
    text, old, new = _text(value), str(old), str(new)
    _check_replace(text, old, new, count)
    return text.replace(old, new, -1 if count is None else count)


def _check_replace(text: str, old: str, new: str, count: int | None) -> None:
    hits = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        hits = min(hits, count)
    if len(text) + hits * (len(new) - len(old)) > MAX_STRING:
        raise SecurityError(f"the template built a string longer than {MAX_STRING}")


def _width(width: Any) -> None:
    if isinstance(width, int) and width > MAX_STRING:
        raise SecurityError(f"a width over {MAX_STRING} is not allowed")


def _center(value: Any, width: int = 80) -> str:
    _width(width)
    return _text(value).center(width)


def _indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    _width(width)
    pad = width if isinstance(width, str) else " " * int(width)
    text = _text(value)
    if len(pad) * (text.count("\n") + 1) + len(text) > MAX_STRING:
        raise SecurityError(f"the template built a string longer than {MAX_STRING}")
    return str(DEFAULT_FILTERS["indent"](text, width, first, blank))


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    fmt = _text(value)
    try:
        funcs.check_format(fmt)
    except ValueError as e:
        raise SecurityError(str(e)) from None
    return str(_sized(fmt % (kwargs or args)))


def _join(value: Iterable[Any], d: str = "", attribute: str | int | None = None) -> str:
    if attribute is not None:
        raise SecurityError("join(attribute=...) is not available: map(attribute=...) first")
    return "".join(_interleave((_text(v) for v in value), str(d)))


def _interleave(items: Iterable[str], sep: str) -> Iterator[str]:
    total = 0
    for i, item in enumerate(items):
        if i:
            yield sep
        total += len(item) + len(sep)
        if total > MAX_STRING:
            raise SecurityError(f"the template built a string longer than {MAX_STRING}")
        yield item


def _printf_filter(value: Any, fmt: Any, *more: Any) -> str:
    """`value | printf("%.2f")`: Go's `$value | printf "%.2f"`, the piped value last."""
    return funcs.printf(fmt, *more, value)


_HEAVY = {name: 8 for name in ("sort", "dictsort", "unique", "groupby", "map", "select", "reject", "min", "max")}
_HEAVY.update({"selectattr": 8, "rejectattr": 8, "sum": 8, "batch": 8, "slice": 8, "title": 8, "wordcount": 4})
_HEAVY.update({"wordwrap": 16, "pprint": 4, "tojson": 4})
"""Filters that call Python code per item count each item this many times."""


def _checked(filter_: Callable[..., Any], weight: int = 1) -> Callable[..., Any]:
    """A filter or test counting its value and arguments as work, and refusing an oversized result."""
    pass_arg = _PassArg.from_obj(filter_)

    @pass_context
    @functools.wraps(filter_)
    def run(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget(context)
        for _ in range(weight):
            budget.handle(value)
        for item in (*args, *kwargs.values()):
            budget.handle(item)
        if pass_arg is _PassArg.context:
            return _sized(filter_(context, value, *args, **kwargs))
        if pass_arg is _PassArg.eval_context:
            return _sized(filter_(context.eval_ctx, value, *args, **kwargs))
        if pass_arg is _PassArg.environment:
            return _sized(filter_(context.environment, value, *args, **kwargs))
        return _sized(filter_(value, *args, **kwargs))

    return run


class _Environment(SandboxedEnvironment):
    """The sandbox with alertd's bounds (see the module doc)."""

    code_generator_class = _Codegen
    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})

    def __init__(self) -> None:
        super().__init__(
            autoescape=False,
            undefined=StrictUndefined,
            finalize=_finalize,
            keep_trailing_newline=True,
            auto_reload=False,
            cache_size=0,
        )
        self.alertd_concat = _bounded_concat
        self.alertd_compare = _compare
        self.alertd_loop_guard = _loop_guard
        for name in _REMOVED_FILTERS:
            self.filters.pop(name, None)
        for name in ("lipsum", "cycler", "joiner"):
            self.globals.pop(name, None)
        own: dict[str, Callable[..., Any]] = {
            "round": _round,
            "upper": _upper,
            "lower": _lower,
            "replace": _replace,
            "center": _center,
            "indent": _indent,
            "format": _format,
            "join": _join,
            "printf": _printf_filter,
            **funcs.FUNCTIONS,
        }
        self.filters.update(own)
        self.filters = {k: _checked(v, _HEAVY.get(k, 1)) for k, v in self.filters.items()}
        self.tests = {k: _checked(cast(Callable[..., Any], v)) for k, v in self.tests.items()}
        self.globals.update({**funcs.FUNCTIONS, "printf": funcs.printf})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_STRING:
                    raise SecurityError(f"the template built a value longer than {MAX_STRING}")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if abs(left) > 1 and right * max(left.bit_length() - 1, 1) > MAX_INT_BITS:
                raise SecurityError(f"the template built a number larger than {MAX_INT_BITS} bits")
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            if len(left) + len(right) > MAX_STRING:
                raise SecurityError(f"the template built a value longer than {MAX_STRING}")
        elif operator == "%" and isinstance(left, str):
            result = _format(left, *(right if isinstance(right, tuple) else (right,)))
            _budget(context).handle(result)
            return result
        result = _sized(self.binop_table[operator](left, right))
        _budget(context).handle(result)
        return result

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget(__context)
        budget.spend()
        for arg in (*args, *kwargs.values()):
            budget.handle(arg)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if owner is not None and not isinstance(__obj, Macro):
            allowed = next((m for t, m in _SAFE_METHODS.items() if isinstance(owner, t)), frozenset())
            if name not in allowed:
                raise SecurityError(f"calling .{name}() is not allowed in a template")
            budget.handle(owner)
            if name == "replace" and isinstance(owner, str) and len(args) >= 2:
                _check_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else None)
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, LabelView) and (attribute in obj or attribute not in _LABEL_METHODS):
            return obj[attribute]  # a label named like a method is the label
        return super().getattr(obj, attribute)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if getattr(value, "__name__", "") in ("format", "format_map") and isinstance(
            getattr(value, "__self__", None), str
        ):

            def refused(*args: Any, **kwargs: Any) -> str:
                raise SecurityError("str.format is not available: use printf(...) or the format filter")

            return refused
        return None


ENV = _Environment()
"""The one environment (stateless after construction: every render brings its own budget)."""


class MissingLabel(Undefined):
    """A label the alert does not have: false in `{% if %}`, `<no value>` when printed (and noted)."""

    __slots__ = ("_notes",)

    def __init__(self, name: str, notes: list[str]) -> None:
        super().__init__(name=name)
        self._notes = notes

    def __str__(self) -> str:
        self._notes.append(str(self._undefined_name))
        return MISSING


class LabelView(dict[str, str]):
    """Labels for a template: `labels.run` and `labels["run"]`; a missing one is a MissingLabel."""

    __slots__ = ("missing",)

    def __init__(self, labels: Mapping[str, str] | Iterable[tuple[str, str]], missing: list[str]) -> None:
        super().__init__(labels)
        self.missing = missing

    def __missing__(self, key: str) -> MissingLabel:
        return MissingLabel(key, self.missing)


# --- the Prometheus/Go spellings ------------------------------------------------------------------

_TAG_OPEN = re.compile(r"\{\{|\{%|\{#")
_RAW_OPEN = re.compile(r"\{%-?\s*raw\s*-?%\}")
_RAW_CLOSE = re.compile(r"\{%-?\s*endraw\s*-?%\}")
_GO_KEYWORD = re.compile(r"""^\s*-?\s*(if|range|with|else|end|define|template|block)(?:\s*-?\s*$|\s+[$."'\w])""")
_ARG = (
    r"""(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"""
    r"""|[$.]?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\s*(?:"[^"]*"|'[^']*'|\d+)\s*\])*)"""
)
_GO_CALL = re.compile(rf"^(\s*-?\s*)({'|'.join(_GO_FUNCS)})((?:\s+{_ARG})+)(\s*-?\s*)$")
_GO_PIPE_CALL = re.compile(rf"\|\s*({'|'.join(_GO_FUNCS)})\s+{_ARG}")
_JINJA_WORDS = frozenset({"if", "else", "and", "or", "not", "in", "is"})
_GO_WORD_CALL = re.compile(r"""\{\{-?\s*([A-Za-z_]\w*)\s+[$."'\w]""")
_GO_EQUIVALENT = {
    "len": "x | length",
    "index": "x[key]",
    **{op: f"a {sym} b" for op, sym in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"))},
    "ge": "a >= b",
    "print": "{{ x }}",
    "html": "x | e",
    "urlquery": "x | urlencode",
    "js": "x | tojson",
    "query": "no query: an alertd template cannot run PromQL",
}
_ONE_ARG = re.compile(rf"\s+({_ARG})")


def translate(source: str) -> str:
    """`source` with the Prometheus spellings rewritten for Jinja; line breaks are kept, so lines stay.

    Raises CheckError for Go template syntax Jinja has no translation for.
    """
    out: list[str] = []
    pos = 0
    while True:
        m = _TAG_OPEN.search(source, pos)
        if m is None:
            out.append(source[pos:])
            return "".join(out)
        if _RAW_OPEN.match(source, m.start()):
            close = _RAW_CLOSE.search(source, m.start())
            if close is None:  # an unclosed raw block: Jinja says so
                out.append(source[pos:])
                return "".join(out)
            out.append(source[pos : close.end()])
            pos = close.end()
            continue
        out.append(source[pos : m.start()])
        opener = m.group(0)
        closer = {"{{": "}}", "{%": "%}", "{#": "#}"}[opener]
        end = _tag_end(source, m.end(), closer)
        body = source[m.end() : end]
        if opener == "{{":
            body = _go_call(body, source, m.start())
        if opener != "{#":
            body = _dollars(body)
        out.append(opener + body)
        pos = end


def _unquoted(text: str, start: int = 0, *, strings: bool = True) -> Iterator[int]:
    """The indexes from `start` of the characters outside Jinja string literals (all of them if not `strings`)."""
    i, n = start, len(text)
    quote = ""
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif strings and ch in "'\"":
            quote = ch
        else:
            yield i
        i += 1


def _tag_end(source: str, start: int, closer: str) -> int:
    """Where the tag that begins at `start` ends (the closer's index), skipping string literals."""
    return next(
        (i for i in _unquoted(source, start, strings=closer != "#}") if source.startswith(closer, i)), len(source)
    )


def _go_call(body: str, source: str, at: int) -> str:
    kw = _GO_KEYWORD.match(body)
    if kw is not None:
        word = kw.group(1)
        hint = {
            "if": "{% if cond %} ... {% endif %}",
            "range": "{% for alert in alerts %} ... {% endfor %}",
            "with": "{% if x %} ... {% endif %} or {% set y = x %}",
            "else": "{% else %}",
            "end": "{% endif %} or {% endfor %}",
        }.get(word, "{% macro %} (templates cannot load other templates)")
        line, col = _line_col(source, at)
        raise CheckError(f"line {line}, column {col}: Go template syntax '{{{{ {word} }}}}': write {hint}")
    m = _GO_CALL.match(body)
    if m is None:
        return body
    args = [a.group(1) for a in _ONE_ARG.finditer(m.group(3))]
    if any(a in _JINJA_WORDS for a in args):
        return body
    return f"{m.group(1)}{m.group(2)}({', '.join(args)}){m.group(4)}"


def _dollars(body: str) -> str:
    """`$name` -> ` name`, `$.Name` -> `  Name` and `.Name` at a token's start -> ` Name`, outside strings."""
    chars = list(body)
    for i in _unquoted(body):
        ch = chars[i]
        if ch == "$":
            nxt = chars[i + 1] if i + 1 < len(chars) else ""
            if nxt.isalpha() or nxt == "_":
                chars[i] = " "
            elif nxt == "." and i + 2 < len(chars) and (chars[i + 2].isalpha() or chars[i + 2] == "_"):
                chars[i] = chars[i + 1] = " "
        elif (
            ch == "."
            and i + 1 < len(chars)
            and chars[i + 1].isupper()
            and (i == 0 or chars[i - 1].isspace() or chars[i - 1] in "(,|[{-")
        ):
            chars[i] = " "
    return "".join(chars)


def _line_col(source: str, index: int) -> tuple[int, int]:
    line = source.count("\n", 0, index) + 1
    return line, index - (source.rfind("\n", 0, index) + 1) + 1


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


# --- compiling and checking -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Compiled:
    """A checked, compiled template."""

    source: str
    template: Template
    names: Mapping[str, Any]
    """The environment's globals as one plain dict (Jinja's own ChainMap costs more per render)."""

    def render(self, data: Mapping[str, Any]) -> str:
        """The text for `data` (cut at MAX_OUTPUT), or RenderError saying why not."""
        parent = {**self.names, **data, _BUDGET: _Budget()}
        context = Context(ENV, parent, self.template.name, self.template.blocks)
        out: list[str] = []
        size = 0
        try:
            for piece in self.template.root_render_func(context):
                out.append(piece)
                size += len(piece)
                if size > MAX_OUTPUT:
                    return "".join(out)[: MAX_OUTPUT - 1] + "…"
        except SecurityError as e:
            raise RenderError(f"refused: {e}") from None
        except RecursionError:
            raise RenderError("refused: the template recursed too deeply") from None
        except (TemplateError, ArithmeticError, ValueError, TypeError, LookupError, AttributeError) as e:
            raise RenderError(f"{type(e).__name__}: {e}") from None
        except MemoryError:
            raise RenderError("refused: the template ran out of memory") from None
        return "".join(out)


def compile_template(source: str, names: Iterable[str], *, hints: Mapping[str, str] | None = None) -> Compiled:
    """Check and compile `source` where `names` are the data names; CheckError (with line, column) if bad."""
    try:
        return _compile(source, names, hints or {})
    except (RecursionError, MemoryError, SyntaxError):  # ((((... nested past what the parser can take
        raise CheckError("line 1: the template nests too deeply to compile") from None


def _compile(source: str, names: Iterable[str], hints: Mapping[str, str]) -> Compiled:
    translated = translate(source)
    try:
        tree = ENV.parse(translated)
    except TemplateSyntaxError as e:
        raise CheckError(_syntax_message(e, source)) from None
    _check_tree(tree, source, frozenset(names), hints)
    for node in tree.find_all(nodes.For):
        node.iter = nodes.Call(nodes.EnvironmentAttribute("alertd_loop_guard"), [node.iter], [], None, None)
    try:
        template = ENV.from_string(tree)
    except TemplateSyntaxError as e:  # the compiler's own checks (an assignment to a reserved name...)
        raise CheckError(_syntax_message(e, source)) from None
    return Compiled(source, template, dict(template.globals))


def _syntax_message(e: TemplateSyntaxError, source: str) -> str:
    message = f"line {e.lineno or 1}: syntax error: {e.message}"
    go = _GO_PIPE_CALL.search(source)
    call = _GO_WORD_CALL.search(source)
    if go is not None:
        message += f" (Go's '| {go.group(1)} arg' has no Jinja spelling: write {go.group(1)}(arg, value))"
    elif call is not None and call.group(1) in _GO_EQUIVALENT:
        message += f" (Go's call '{call.group(1)} ...' has no Jinja spelling: write {_GO_EQUIVALENT[call.group(1)]})"
    elif "$" in (e.message or "") or ".Labels" in source or "$." in source:
        message += " (write labels.NAME or $labels.NAME, value or $value)"
    return message


def _check_tree(tree: nodes.Template, source: str, names: frozenset[str], hints: Mapping[str, str]) -> None:
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
    for f in tree.find_all(nodes.Filter):
        if f.name not in ENV.filters:
            where = _find(source, f.lineno, f.name)
            raise CheckError(f"{where}: unknown filter {f.name!r} (known: {', '.join(_KNOWN_FILTERS)})")
        _check_attribute_args(f, source)
    for t in tree.find_all(nodes.Test):
        if t.name not in ENV.tests:
            where = _find(source, t.lineno, t.name)
            raise CheckError(f"{where}: unknown test {t.name!r} (known: {', '.join(sorted(DEFAULT_TESTS))})")
        _check_attribute_args(t, source)
    known = names | set(ENV.globals)
    for name in sorted(meta.find_undeclared_variables(tree)):
        if name not in known:
            first = next(n.lineno for n in tree.find_all(nodes.Name) if n.name == name)
            why = hints.get(name) or f"known: {', '.join(sorted(names))}"
            raise CheckError(f"{_find(source, first, name)}: unknown name {name!r} ({why})")
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr not in _ALL_SAFE_METHODS:
            where = _find(source, call.lineno, call.node.attr)
            hint = " (use printf(...) or the format filter)" if call.node.attr in ("format", "format_map") else ""
            raise CheckError(f"{where}: calling .{call.node.attr}() is not allowed in a template{hint}")


_UNDERSCORE = "names starting with '_' are not allowed in a template"
_KNOWN_FILTERS = sorted(set(ENV.filters))


def _check_attribute_args(node: nodes.Filter | nodes.Test, source: str) -> None:
    if node.name not in _ATTRIBUTE_FILTERS:
        return
    values = [kw.value for kw in node.kwargs if kw.key == "attribute"]
    if node.name in ("attr", "selectattr", "rejectattr") and node.args:
        values.append(node.args[0])
    for v in values:
        if isinstance(v, nodes.Const) and isinstance(v.value, str) and re.search(r"(^|\.)_", v.value):
            raise CheckError(f"{_find(source, node.lineno, node.name)}: {_UNDERSCORE}")
