"""Reading YAML with places: `${VAR}` expansion, duplicate keys, and the line of every error.

The file is composed into nodes first, so every value keeps its line; environment variables are
expanded in scalars (never in keys), after parsing, so a value can't change the file's structure.
`$${` writes a literal `${`. An unset variable or a duplicate key is raised at once, or with `keep_going`
kept in `Document.problems` (the unset variable read as empty), so the file's other problems are found too.

Bounds, so a hostile file can't hang `alertd check` or a reload: at most MAX_BYTES are read, and the
document may hold at most MAX_NODES nodes once its aliases are expanded (a 461-byte "billion laughs"
expands to 387 million), counted on the node graph before anything walks it.

Every YAML alertd reads goes through these bounds: the rules files (`load_yaml`, `parse_yaml`), and the
data files of the sources (an MLflow file store's `meta.yaml`: `parse_data`, with bounds of their own, no
`${VAR}` expansion, and a limit on the characters its scalars expand to, so an alias bomb is refused
before anything, `str()` included, can expand it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml

from alertd.errors import ConfigError, Problem

MAX_BYTES = 1 << 20
"""The largest rules file read (1 MiB)."""
MAX_NODES = 100_000
"""The most YAML nodes a document may hold with its aliases expanded."""

_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class Document:
    """A parsed YAML document and its node tree (for lines)."""

    file: str
    data: Any
    root: yaml.Node | None
    problems: list[Problem] = field(default_factory=list)
    """With `keep_going`: the unset variables and duplicate keys, each with its place."""

    def line_of(self, loc: Sequence[str | int], *, in_file: bool = False) -> tuple[str, int | None]:
        """The readable place (`rules[3].condition`) and line of a pydantic error location (`in_file`: only
        the parts that are in the file, so a missing key's place is its mapping's)."""
        node = self.root
        parts: list[str] = []
        line = node.start_mark.line + 1 if node is not None else None
        for n, elem in enumerate(loc):
            last = n == len(loc) - 1 and not in_file
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


def load_yaml(path: str, env: Mapping[str, str] | None = None, *, keep_going: bool = False) -> Document:
    """Parse `path`, expanding `${VAR}` from `env` (default: the process environment)."""
    env = os.environ if env is None else env
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError([Problem(path, "", f"can't read the file: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        where = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise ConfigError([Problem(path, "", f"the file is not UTF-8 text ({where})")]) from None
    if len(text) > MAX_BYTES:
        raise ConfigError([Problem(path, "", f"the file is larger than {MAX_BYTES // 1024} KiB")])
    return parse_yaml(text, path, env, keep_going=keep_going)


def parse_yaml(text: str, file: str, env: Mapping[str, str], *, keep_going: bool = False) -> Document:
    """Parse YAML text; raise ConfigError with the line of a syntax error, or of a bad variable or a duplicate
    key (with `keep_going`, those two are kept in `Document.problems` instead)."""
    with _loading(text, file) as loader:
        root = loader.get_single_node()
        problems: list[Problem] = []
        if root is not None:
            _check_size(root, file, MAX_NODES)
            _expand(root, loader, env, file, problems, "", set())
        if problems and not keep_going:
            raise ConfigError(problems)
        data = loader.construct_document(root) if root is not None else None
    return Document(file, data, root, problems)


def parse_data(text: str, file: str, *, max_nodes: int, max_chars: int) -> Any:
    """Plain YAML data (a source's file: no `${VAR}` expansion) within bounds: at most `max_nodes` values and
    `max_chars` characters of scalars, both counted with the aliases expanded, before anything is built.
    ConfigError (one problem, naming the bound passed, or saying what is wrong with the YAML)."""
    with _loading(text, file) as loader:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_size(root, file, max_nodes, max_chars)
        return loader.construct_document(root)


@contextmanager
def _loading(text: str, file: str) -> Iterator[yaml.SafeLoader]:
    """A safe loader of `text`, disposed of at the end; what PyYAML raises becomes one ConfigError naming
    `file` (and the line, where PyYAML knows it)."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        yield loader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise ConfigError([Problem(file, "", f"invalid YAML: {message}", mark.line + 1 if mark else None)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(file, "", f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise ConfigError([Problem(file, "", "invalid YAML: nested too deeply")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_size(root: yaml.Node, file: str, max_nodes: int, max_chars: int | None = None) -> None:
    """Refuse a document whose aliases expand it beyond `max_nodes` values (or `max_chars` characters of
    scalars): each node's expanded size, memoised, so the check costs the node graph, not its expansion."""
    sizes: dict[int, tuple[int, int]] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        size, chars = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        for c in children:
            n, k = sizes.get(id(c), (0, 0))
            size, chars = size + n, chars + k
        line = node.start_mark.line + 1
        if size > max_nodes:
            message = f"the document expands to more than {max_nodes} values (aliases of aliases?)"
            raise ConfigError([Problem(file, "", message, line)])
        if max_chars is not None and chars > max_chars:
            message = f"the document expands to more than {max_chars} characters (aliases of aliases?)"
            raise ConfigError([Problem(file, "", message, line)])
        sizes[id(node)] = (size, chars)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expand(
    node: yaml.Node,
    loader: yaml.SafeLoader,
    env: Mapping[str, str],
    file: str,
    out: list[Problem],
    place: str,
    seen: set[int],
) -> None:
    if id(node) in seen:  # an alias: expanded where its anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if "$" in node.value:
            _expand_scalar(node, loader, env, file, out, place)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _expand(item, loader, env, file, out, f"{place}[{i}]", seen)
    elif isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value)
            sub = f"{place}.{key}" if place else key
            if key in keys:
                out.append(Problem(file, sub, f"duplicate key (first at line {keys[key]})", k.start_mark.line + 1))
            keys[key] = k.start_mark.line + 1
            _expand(v, loader, env, file, out, sub, seen)


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
