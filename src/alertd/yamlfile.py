"""Reading YAML with places: `${VAR}` expansion, duplicate keys, and the line of every error.

The file is composed into nodes first, so every value keeps its line; environment variables are
expanded in scalars (never in keys), after parsing, so a value can't change the file's structure.
`$${` writes a literal `${`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from alertd.errors import ConfigError, Problem

_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class Document:
    """A parsed YAML document and its node tree (for lines)."""

    file: str
    data: Any
    root: yaml.Node | None

    def line_of(self, loc: Sequence[str | int]) -> tuple[str, int | None]:
        """The readable place (`rules[3].condition`) and line of a pydantic error location."""
        node = self.root
        parts: list[str] = []
        line = node.start_mark.line + 1 if node is not None else None
        for n, elem in enumerate(loc):
            last = n == len(loc) - 1
            child = _child(node, elem)
            if child is None and not last:
                continue  # A union's tag or a type name: not a place in the file.
            parts.append(f"[{elem}]" if isinstance(elem, int) else ("." if parts else "") + str(elem))
            if child is not None:
                node = child
                line = child.start_mark.line + 1
        return "".join(parts), line


def _child(node: yaml.Node | None, elem: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(elem):
                found: yaml.Node = v
                return found
    if isinstance(node, yaml.SequenceNode) and isinstance(elem, int) and 0 <= elem < len(node.value):
        item: yaml.Node = node.value[elem]
        return item
    return None


def load_yaml(path: str, env: Mapping[str, str] | None = None) -> Document:
    """Parse `path`, expanding `${VAR}` from `env` (default: the process environment)."""
    env = os.environ if env is None else env
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError([Problem(path, "", f"can't read the file: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        where = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise ConfigError([Problem(path, "", f"the file is not UTF-8 text ({where})")]) from None
    return parse_yaml(text, path, env)


def parse_yaml(text: str, file: str, env: Mapping[str, str]) -> Document:
    """Parse YAML text; raise ConfigError with the line of a syntax error or a bad variable."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        problems: list[Problem] = []
        if root is not None:
            _expand(root, loader, env, file, problems, "")
        if problems:
            raise ConfigError(problems)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        message = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise ConfigError([Problem(file, "", f"invalid YAML: {message}", line)]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(file, "", f"invalid YAML: {exc}")]) from exc
    except RecursionError:
        raise ConfigError([Problem(file, "", "invalid YAML: nested too deeply")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return Document(file, data, root)


def _expand(
    node: yaml.Node, loader: yaml.SafeLoader, env: Mapping[str, str], file: str, out: list[Problem], place: str
) -> None:
    if isinstance(node, yaml.ScalarNode):
        if "$" in node.value:
            _expand_scalar(node, loader, env, file, out, place)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _expand(item, loader, env, file, out, f"{place}[{i}]")
    elif isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value)
            sub = f"{place}.{key}" if place else key
            if key in seen:
                out.append(Problem(file, sub, f"duplicate key (first at line {seen[key]})", k.start_mark.line + 1))
            seen[key] = k.start_mark.line + 1
            _expand(v, loader, env, file, out, sub)


def _expand_scalar(
    node: yaml.ScalarNode, loader: yaml.SafeLoader, env: Mapping[str, str], file: str, out: list[Problem], place: str
) -> None:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return "${"
        name, default = m.group(1), m.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                out.append(Problem(file, place, f"environment variable {name} is not set", node.start_mark.line + 1))
                return ""
            return default
        return value

    expanded = _VAR.sub(sub, node.value)
    if expanded != node.value:
        node.value = expanded
        if node.style is None:  # A plain scalar: re-resolve, so `${PORT:-587}` is an int.
            node.tag = loader.resolve(yaml.ScalarNode, expanded, (True, False))  # type: ignore[no-untyped-call]
