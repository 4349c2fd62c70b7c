"""`expr` conditions: a small, safe expression over several metrics of one run, parsed once, never `eval`.

    val_loss / train_loss > 1.5
    `eval/loss` / `train/loss` > 1.5 and not isnan(`train/loss`)
    abs(`train/grad_norm` - `train/grad_norm_ema`) >= 10 or isinf(`train/loss`)

The grammar, loosest binding first (every binary operator is left-associative):

    expr    := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | compare
    compare := sum (('>' | '>=' | '<' | '<=' | '==' | '!=') sum)?      (comparisons don't chain)
    sum     := product (('+' | '-') product)*
    product := unary (('*' | '/') unary)*
    unary   := ('-' | '+') unary | atom
    atom    := number | name | '(' expr ')' | function '(' expr (',' expr)* ')'

Numbers: `2`, `1.5`, `.5`, `1e-3`, and `NaN`, `nan`, `Inf`, `inf` (the spellings the rest of the rules
file takes). Names: bare `[A-Za-z_][A-Za-z0-9_.:]*` (`val_loss`, `gpu.utilization`); any other metric name,
and a glob (`*`, `?`, `[...]`), in backquotes: `` `train/loss` ``, `` `*val*loss` ``. The words `and`, `or`,
`not`, `NaN`, `nan`, `Inf`, `inf` are not names (backquote a metric that is called so). Functions: `abs(x)`,
`min(a, b)`, `max(a, b)` (NaN when either is NaN), `isnan(x)`, `isinf(x)` (+Inf or -Inf), `isfinite(x)`.

Types are checked when the rule is loaded: arithmetic and comparisons take numbers, `and`/`or`/`not`
take tests, and the whole expression must be a test (a comparison, `isnan(...)`, ...), not a number.

Arithmetic is IEEE 754: `x / 0` is +Inf or -Inf (NaN for `0 / 0` and `NaN / 0`), never an error; any
arithmetic on NaN gives NaN. Every comparison with a NaN operand is false, `!=` included (as the
threshold conditions: use `isnan`).

Bounds (hostile input gets a clear error, never a RecursionError): at most `MAX_LENGTH` characters,
`MAX_DEPTH` levels of nesting (parentheses, operators in a chain, functions), `MAX_NAMES` names.

The alert's value is the left side of the first comparison (descending the left operands of `and`,
`or`, `not`); for `isnan(x)`, `isinf(x)`, `isfinite(x)`, it is `x`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import translate

from alertd.buffer import Series
from alertd.rules.compare import OPS

MAX_LENGTH = 2000
"""Characters in one expression."""
MAX_DEPTH = 32
"""Levels of nesting in one expression (a chain `a + b + c` is two levels)."""
MAX_NAMES = 16
"""Distinct metric names in one expression."""
_MAX_NAME = 256
"""Characters in one backquoted name."""

Values = Sequence[float]
Num = Callable[[Values], float]
Test = Callable[[Values], bool]

_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]*")
_GLOB = re.compile(r"[*?\[]")
_PATHLIKE = re.compile(r"[A-Za-z0-9_.:/-]{1,256}")
_SPECIAL = {"NaN": math.nan, "nan": math.nan, "Inf": math.inf, "inf": math.inf}
_WORDS = frozenset({"and", "or", "not"})
_CMP = OPS
_FUNCS = {"abs": 1, "min": 2, "max": 2, "isnan": 1, "isinf": 1, "isfinite": 1}
_TESTS = frozenset({"isnan", "isinf", "isfinite"})
_PUNCT = ("(", ")", ",", "+", "-", "*", "/")
_WRONG = {"&&": "and", "||": "or", "!": "not", "=": "==", "**": "a product", "^": "a product", "%": "division"}


class ExprError(ValueError):
    """A problem with an expression, with the column where it is (1-based)."""


def _div(a: float, b: float) -> float:
    """IEEE division: x/0 is ±Inf, 0/0 and NaN/0 are NaN."""
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _min(a: float, b: float) -> float:
    return math.nan if a != a or b != b else min(a, b)


def _max(a: float, b: float) -> float:
    return math.nan if a != a or b != b else max(a, b)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    """`num`, `name`, `func`, `word` (and/or/not), `op` (a comparison), `punct`, `end`."""
    text: str
    col: int
    number: float = 0.0


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "`":
            token, i = _quoted(text, i)
        elif m := _NUMBER.match(text, i):
            token, i = _Token("num", m.group(), i + 1, float(m.group())), m.end()
        elif m := _IDENT.match(text, i):
            token, i = _word(text, i, m.group()), m.end()
        else:
            token = _operator(text, i)
            i += len(token.text)
        out.append(token)
    out.append(_Token("end", "", n + 1))
    return out


def _quoted(text: str, i: int) -> tuple[_Token, int]:
    """A backquoted name at `i`, and where it ends."""
    col = i + 1
    end = text.find("`", i + 1)
    if end < 0:
        raise ExprError(f"column {col}: a backquoted name is not closed (add a ` at its end)")
    name = text[i + 1 : end]
    if not name.strip() or len(name) > _MAX_NAME:
        raise ExprError(f"column {col}: a backquoted name has 1 to {_MAX_NAME} characters")
    return _Token("name", name, col), end + 1


def _word(text: str, i: int, word: str) -> _Token:
    """The identifier `word` at `i`: a number (NaN, Inf), a keyword, a function or a name."""
    col, after = i + 1, i + len(word)
    if text[after : after + 1] == "/" and _IDENT.match(text, after + 1) and word not in _WORDS:
        whole = _PATHLIKE.match(text, i)
        shown = whole.group() if whole else word
        raise ExprError(
            f"column {col}: write the metric name in backquotes (`{shown}`), or a division with spaces ({word} / ...)"
        )
    if word in _SPECIAL:
        return _Token("num", word, col, _SPECIAL[word])
    if word in _WORDS:
        return _Token("word", word, col)
    if word in _FUNCS and text[after:].lstrip().startswith("("):
        return _Token("func", word, col)
    return _Token("name", word, col)


def _operator(text: str, i: int) -> _Token:
    """A comparison or a punctuation mark at `i` (its text is what it takes); ExprError for anything else."""
    col, c, two = i + 1, text[i], text[i : i + 2]
    if two in _CMP:
        return _Token("op", two, col)
    if two in _WRONG:
        raise ExprError(f"column {col}: {two!r} is not an operator here: use {_WRONG[two]}")
    if c in _CMP:
        return _Token("op", c, col)
    if c in _PUNCT:
        return _Token("punct", c, col)
    if c in _WRONG:
        raise ExprError(f"column {col}: {c!r} is not an operator here: use {_WRONG[c]}")
    hint = " (write such a metric name in backquotes: `train/loss`)" if c in "/.-:" or c.isalnum() else ""
    raise ExprError(f"column {col}: unexpected character {c!r}{hint}")


@dataclass(frozen=True, slots=True)
class _Node:
    """A compiled part of the expression: a number (`fn` gives a float) or a test (`fn` gives a bool)."""

    is_test: bool
    fn: Callable[[Values], object]
    depth: int
    value: Num | None = None
    """The part whose value the alert reports (the left side of the first comparison)."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0
        self.names: list[str] = []

    def peek(self) -> _Token:
        return self.toks[self.pos]

    def take(self) -> _Token:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, text: str, what: str) -> None:
        tok = self.take()
        if tok.text != text or tok.kind not in ("punct",):
            raise ExprError(f"column {tok.col}: expected {what}, found {_shown(tok)}")

    def node(self, is_test: bool, fn: Callable[[Values], object], *parts: _Node, value: Num | None = None) -> _Node:
        depth = 1 + max((p.depth for p in parts), default=0)
        if depth > MAX_DEPTH:
            raise ExprError(f"the expression nests deeper than {MAX_DEPTH} levels; write it more simply")
        return _Node(is_test, fn, depth, value)

    def parse(self) -> _Node:
        tree = self.or_(0)
        tok = self.peek()
        if tok.kind != "end":
            raise ExprError(f"column {tok.col}: unexpected {_shown(tok)} (an operator or the end was expected)")
        return tree

    def _nest(self, depth: int) -> int:
        if depth >= MAX_DEPTH:
            raise ExprError(f"the expression nests deeper than {MAX_DEPTH} levels; write it more simply")
        return depth + 1

    def or_(self, depth: int) -> _Node:
        left = self.and_(depth)
        while self.peek().kind == "word" and self.peek().text == "or":
            tok = self.take()
            right = self.and_(depth)
            a, b = _test(left, "or", tok), _test(right, "or", tok)
            left = self.node(True, _or(a, b), left, right, value=left.value)
        return left

    def and_(self, depth: int) -> _Node:
        left = self.not_(depth)
        while self.peek().kind == "word" and self.peek().text == "and":
            tok = self.take()
            right = self.not_(depth)
            a, b = _test(left, "and", tok), _test(right, "and", tok)
            left = self.node(True, _and(a, b), left, right, value=left.value)
        return left

    def not_(self, depth: int) -> _Node:
        tok = self.peek()
        if tok.kind == "word" and tok.text == "not":
            self.take()
            inner = self.not_(self._nest(depth))
            a = _test(inner, "not", tok)
            return self.node(True, _not(a), inner, value=inner.value)
        return self.compare(depth)

    def compare(self, depth: int) -> _Node:
        left = self.sum(depth)
        tok = self.peek()
        if tok.kind != "op":
            return left
        self.take()
        right = self.sum(depth)
        a, b = _num(left, tok.text, tok), _num(right, tok.text, tok)
        op = _CMP[tok.text]
        nxt = self.peek()
        if nxt.kind == "op":
            raise ExprError(f"column {nxt.col}: comparisons don't chain; write `a < b and b < c`")
        return self.node(True, _compared(op, a, b), left, right, value=a)

    def sum(self, depth: int) -> _Node:
        left = self.product(depth)
        while self.peek().kind == "punct" and self.peek().text in "+-":
            tok = self.take()
            right = self.product(depth)
            a, b = _num(left, tok.text, tok), _num(right, tok.text, tok)
            fn = _binary(operator.add if tok.text == "+" else operator.sub, a, b)
            left = self.node(False, fn, left, right)
        return left

    def product(self, depth: int) -> _Node:
        left = self.unary(depth)
        while self.peek().kind == "punct" and self.peek().text in "*/":
            tok = self.take()
            right = self.unary(depth)
            a, b = _num(left, tok.text, tok), _num(right, tok.text, tok)
            fn = _binary(operator.mul if tok.text == "*" else _div, a, b)
            left = self.node(False, fn, left, right)
        return left

    def unary(self, depth: int) -> _Node:
        tok = self.peek()
        if tok.kind == "punct" and tok.text in "+-":
            self.take()
            inner = self.unary(self._nest(depth))
            a = _num(inner, tok.text, tok)
            if tok.text == "+":
                return self.node(False, a, inner)
            return self.node(False, _unary(operator.neg, a), inner)
        return self.atom(depth)

    def atom(self, depth: int) -> _Node:
        tok = self.take()
        if tok.kind == "num":
            number = tok.number
            return self.node(False, _constant(number))
        if tok.kind == "name":
            if tok.text not in self.names:
                if len(self.names) >= MAX_NAMES:
                    raise ExprError(f"column {tok.col}: more than {MAX_NAMES} metric names in one expression")
                self.names.append(tok.text)
            slot = self.names.index(tok.text)
            return self.node(False, _slot(slot))
        if tok.kind == "punct" and tok.text == "(":
            inner = self.or_(self._nest(depth))
            self.expect(")", "')'")
            return inner
        if tok.kind == "func":
            return self.call(tok, self._nest(depth))
        raise ExprError(f"column {tok.col}: expected a number, a name, a function or '(', found {_shown(tok)}")

    def call(self, tok: _Token, depth: int) -> _Node:
        self.expect("(", "'('")
        args = [self.or_(depth)]
        while self.peek().kind == "punct" and self.peek().text == ",":
            self.take()
            args.append(self.or_(depth))
        self.expect(")", "')' or ','")
        want = _FUNCS[tok.text]
        if len(args) != want:
            raise ExprError(f"column {tok.col}: {tok.text}() takes {want} argument{'s' * (want > 1)}, got {len(args)}")
        fns = [_num(a, f"{tok.text}()", tok) for a in args]
        a = fns[0]
        if tok.text == "abs":
            return self.node(False, _unary(abs, a), *args)
        if tok.text in ("min", "max"):
            b, pick = fns[1], (_min if tok.text == "min" else _max)
            return self.node(False, _binary(pick, a, b), *args)
        if tok.text == "isnan":
            return self.node(True, _predicate(math.isnan, a), *args, value=a)
        if tok.text == "isinf":
            return self.node(True, _predicate(math.isinf, a), *args, value=a)
        return self.node(True, _predicate(math.isfinite, a), *args, value=a)


# The compiled parts: closures over their operands (made by these functions, so that none sees a later
# value of a parser variable).


def _or(a: Test, b: Test) -> Test:
    return lambda v: a(v) or b(v)


def _and(a: Test, b: Test) -> Test:
    return lambda v: a(v) and b(v)


def _not(a: Test) -> Test:
    return lambda v: not a(v)


def _compared(op: Callable[[float, float], bool], a: Num, b: Num) -> Test:
    def test(v: Values) -> bool:
        x, y = a(v), b(v)
        return x == x and y == y and op(x, y)  # nothing compares true with NaN

    return test


def _binary(op: Callable[[float, float], float], a: Num, b: Num) -> Num:
    return lambda v: op(a(v), b(v))


def _unary(op: Callable[[float], float], a: Num) -> Num:
    return lambda v: op(a(v))


def _predicate(op: Callable[[float], bool], a: Num) -> Test:
    return lambda v: op(a(v))


def _constant(x: float) -> Num:
    return lambda v: x


def _slot(i: int) -> Num:
    return lambda v: v[i]


def _shown(tok: _Token) -> str:
    return "the end" if tok.kind == "end" else repr(tok.text)


def _test(node: _Node, op: str, tok: _Token) -> Test:
    if not node.is_test:
        raise ExprError(f"column {tok.col}: `{op}` takes tests (comparisons, isnan(...)), not numbers")
    return node.fn  # type: ignore[return-value]


def _num(node: _Node, op: str, tok: _Token) -> Num:
    if node.is_test:
        raise ExprError(
            f"column {tok.col}: `{op}` takes numbers, not a test (a comparison or isnan(...)); "
            "combine tests with and, or, not"
        )
    return node.fn  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Expr:
    """A compiled expression: its metric names (in order of first appearance) and two functions of their values
    at one step: the test and the value the alert reports. Also the `Condition` of its rule (judged per run
    by the engine, across series: `check` on one series is never used)."""

    text: str
    names: tuple[str, ...]
    test: Test = field(compare=False, repr=False)
    value: Num = field(compare=False, repr=False)
    globs: tuple[re.Pattern[str] | None, ...] = field(compare=False, repr=False)
    """Per name, the compiled glob (None: an exact name)."""

    def check(self, series: Series, i: int) -> bool:
        """Never used: an expression is judged across the series of a run."""
        return False

    def describe(self) -> str:
        """`expr val_loss / train_loss > 1.5`."""
        return f"expr {self.text}"


def parse_expr(text: object) -> Expr:
    """Compile an expression; raise ExprError (a ValueError) saying what is wrong and where."""
    if not isinstance(text, str):
        raise ExprError(f'expr is a string such as "`eval/loss` / `train/loss` > 1.5", got {type(text).__name__}')
    if len(text) > MAX_LENGTH:
        raise ExprError(f"the expression is {len(text)} characters long; at most {MAX_LENGTH}")
    if not text.strip():
        raise ExprError("the expression is empty")
    parser = _Parser(text)
    tree = parser.parse()
    if not tree.is_test:
        raise ExprError("the expression must be a test (`a / b > 1.5`, isnan(a), ...), not a number")
    names = tuple(parser.names)
    if not names:
        raise ExprError("the expression names no metric")
    value = tree.value or _constant(math.nan)
    globs = tuple(re.compile(translate(n)) if _GLOB.search(n) else None for n in names)
    return Expr(text.strip(), names, tree.fn, value, globs)  # type: ignore[arg-type]
