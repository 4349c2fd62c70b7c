"""A template checked and compiled once (`compile_template`), then rendered (`Compiled.render`) as often as needed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateSyntaxError, meta
from jinja2.environment import Template
from jinja2.exceptions import SecurityError, TemplateError

from alertd.templating.bounds import BUDGET_KEY, MAX_OUTPUT, Budget
from alertd.templating.check import check_tree, syntax_message
from alertd.templating.direct import Step, render, simple
from alertd.templating.env import ENV
from alertd.templating.errors import CheckError, RenderError
from alertd.templating.gospell import translate
from alertd.templating.jinja_compat import guard_loops, render_stream


@dataclass(frozen=True, slots=True, eq=False)
class Compiled:
    """A checked, compiled template."""

    source: str
    template: Template
    names: Mapping[str, Any]
    """The environment's globals as one plain dict (Jinja's own ChainMap costs more per render)."""
    reads: frozenset[str]
    """The names the template reads (data names and globals): a caller may leave out a costly one it does not."""
    steps: tuple[Step, ...] | None = None
    """The template as `direct` steps, where it is that simple and its caller gives every data name."""

    def render(self, data: Mapping[str, Any]) -> str:
        """The text for `data` (cut at MAX_OUTPUT), or RenderError saying why not."""
        out: list[str] = []
        size = 0
        try:
            if self.steps is not None:
                return render(self.steps, data)
            for piece in render_stream(self.template, {**self.names, **data, BUDGET_KEY: Budget()}):
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


def compile_template(
    source: str, names: Iterable[str], *, hints: Mapping[str, str] | None = None, all_given: bool = False
) -> Compiled:
    """Check and compile `source` where `names` are the data names; CheckError (with line, column) if bad.
    `all_given`: every render's data holds every one of `names` (a template simple enough is then rendered without
    Jinja's runtime: `direct`)."""
    try:
        return _compile(source, frozenset(names), hints or {}, all_given)
    except (RecursionError, MemoryError, SyntaxError):  # ((((... nested past what the parser can take
        raise CheckError("line 1: the template nests too deeply to compile") from None


def _compile(source: str, names: frozenset[str], hints: Mapping[str, str], all_given: bool) -> Compiled:
    translated = translate(source)
    try:
        tree = ENV.parse(translated)
    except TemplateSyntaxError as e:
        raise CheckError(syntax_message(e, source)) from None
    check_tree(tree, source, names, hints)
    steps = simple(tree, names) if all_given else None  # before Jinja's compiler sees the tree
    guard_loops(tree)
    try:
        template = ENV.from_string(tree)
    except TemplateSyntaxError as e:  # the compiler's own checks (an assignment to a reserved name...)
        raise CheckError(syntax_message(e, source)) from None
    reads = frozenset(meta.find_undeclared_variables(tree))
    return Compiled(source, template, dict(template.globals), reads, steps)
