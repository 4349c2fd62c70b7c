"""The installed Jinja2 is one `alertd.templating.jinja_compat` was written against, with every private name it uses.

A Jinja2 upgrade that moves or reshapes one of them fails here, naming it, rather than quietly changing what
a template may do (a renamed `visit_Concat` would leave `~` unbounded, a renamed `wrap_str_format` would
hand `str.format` back to templates).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment, pass_context, pass_environment, pass_eval_context
from jinja2.exceptions import SecurityError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from alertd.templating import jinja_compat
from alertd.templating.env import ENV
from alertd.templating.jinja_compat import RELIED_ON, TESTED, passed_first, render_stream

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = version("jinja2")
WHY = f"alertd.templating.jinja_compat was written against Jinja2 {','.join(TESTED)}; Jinja2 {INSTALLED} is installed"


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name, None)
    assert found is not None, f"{dotted} is gone ({WHY}): see jinja_compat's docstring for what it was used for"
    return found


def _instance(dotted: str, found: Any) -> Any:
    """What to look the members up on: a real Template or Context (their attributes are set per instance)."""
    template = Environment().from_string("x")
    return {"jinja2.environment.Template": template, "jinja2.runtime.Context": template.new_context()}.get(
        dotted, found
    )


def _parameters(func: Any) -> str:
    """`self, node, *args, **kwargs`: the parameter names, a class's name mangling (`__self`) undone."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    names = (stars.get(p.kind, "") + re.sub(r"^_[A-Za-z]\w*?(__\w+)$", r"\1", p.name) for p in _signature(func))
    return ", ".join(names)


def _signature(func: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(func).parameters.values())


def test_the_installed_jinja2_is_inside_the_bound_jinja_compat_was_written_against() -> None:
    assert Version(INSTALLED) in SpecifierSet(",".join(TESTED)), WHY


def test_pyproject_asks_for_the_jinja2_versions_jinja_compat_was_written_against() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (jinja,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name.lower() == "jinja2"]
    assert jinja.specifier == SpecifierSet(",".join(TESTED)), (
        f"pyproject.toml asks for jinja2{jinja.specifier}, jinja_compat.TESTED says {','.join(TESTED)}"
    )


@pytest.mark.parametrize("dotted", sorted(RELIED_ON))
def test_each_private_name_jinja_compat_uses_exists_with_the_shape_relied_on(dotted: str) -> None:
    target = _instance(dotted, _resolve(dotted))
    for member in RELIED_ON[dotted]:
        name, _, params = member.partition("(")
        if isinstance(target, dict):
            assert name in target, f"{dotted} has no {name!r} ({WHY})"
            continue
        assert hasattr(target, name), f"{dotted}.{name} is gone ({WHY})"
        if params:
            owner = target if inspect.isclass(target) else type(target)  # `self` as the class shows it
            found = _parameters(getattr(owner, name))
            assert found == params.rstrip(")"), f"{dotted}.{name} takes ({found}), not ({params} ({WHY})"


def test_the_compiled_code_calls_the_bounded_hooks() -> None:
    """The code generator's overrides are the ones Jinja calls: `~`, comparisons and loops go through alertd."""
    tree = ENV.parse("{% for x in [1, 2] %}{{ x ~ 'a' }}{{ x in [1] }}{% endfor %}")
    jinja_compat.guard_loops(tree)
    code = ENV.compile(tree, raw=True)
    for hook in ("alertd_concat", "alertd_compare", "alertd_loop_guard"):
        assert f"environment.{hook}" in code, f"the compiled code does not call {hook} ({WHY})"


def test_str_format_is_refused_through_the_sandboxs_hook() -> None:
    refused = ENV.getattr("{0.__class__}", "format")
    with pytest.raises(SecurityError, match=r"str\.format is not available"):
        refused(1)


def test_filters_get_what_jinja_passes_them_first() -> None:
    env = Environment()
    context = env.from_string("x").new_context()

    def plain(v: Any) -> Any:
        return v

    assert passed_first(plain) is None
    for mark, first in ((pass_context, context), (pass_eval_context, context.eval_ctx), (pass_environment, env)):
        wants = passed_first(mark(plain))
        assert wants is not None and wants(context) is first, mark


def test_a_render_stream_sees_its_plain_dict() -> None:
    template = Environment().from_string("{{ a }}-{{ b }}")
    assert "".join(render_stream(template, {"a": 1, "b": "two"})) == "1-two"


_PRIVATE_MODULES = ("jinja2.compiler", "jinja2.utils", "jinja2.filters", "jinja2.tests", "jinja2.lexer")
_PRIVATE_NAMES = ("Macro", "LoopContext", "root_render_func", "wrap_str_format", "CodeGenerator", "_PassArg")


def test_no_module_but_jinja_compat_uses_jinja2s_private_api() -> None:
    """Private Jinja2 modules and names stay in jinja_compat, where the tests above watch them."""
    compat = ROOT / "src/alertd/templating/jinja_compat.py"
    for path in sorted((ROOT / "src/alertd").rglob("*.py")):
        if path == compat:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jinja2"):
                assert node.module not in _PRIVATE_MODULES, f"{path}:{node.lineno} imports {node.module}"
                for alias in node.names:
                    assert alias.name not in _PRIVATE_NAMES and not alias.name.startswith("_"), (
                        f"{path}:{node.lineno} imports {alias.name} from {node.module}: use jinja_compat"
                    )
            elif isinstance(node, ast.Attribute):
                assert node.attr not in _PRIVATE_NAMES, f"{path}:{node.lineno} uses .{node.attr}: use jinja_compat"
