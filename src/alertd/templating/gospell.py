"""The Prometheus (Go template) spellings, rewritten for Jinja before it sees a template.

`$labels.x` and `.Labels.x` become `labels.x`/`Labels.x`, and a Go call `humanize $value` becomes
`humanize(value)`. Other Go syntax (`{{ range }}`, `{{ if }}`, `{{ end }}`) is a clear error suggesting the
Jinja spelling, and `go_hint` says what to write where a Go spelling made a Jinja syntax error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from alertd.templating import funcs
from alertd.templating.errors import CheckError

_GO_FUNCS = (*funcs.FUNCTIONS, "printf")
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


def go_hint(source: str, message: str) -> str:
    """What to add to Jinja's syntax error `message` about `source` where a Go spelling caused it ("" if none)."""
    go = _GO_PIPE_CALL.search(source)
    call = _GO_WORD_CALL.search(source)
    if go is not None:
        return f" (Go's '| {go.group(1)} arg' has no Jinja spelling: write {go.group(1)}(arg, value))"
    if call is not None and call.group(1) in _GO_EQUIVALENT:
        return f" (Go's call '{call.group(1)} ...' has no Jinja spelling: write {_GO_EQUIVALENT[call.group(1)]})"
    if "$" in message or ".Labels" in source or "$." in source:
        return " (write labels.NAME or $labels.NAME, value or $value)"
    return ""


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
