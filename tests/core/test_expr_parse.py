"""The `expr` grammar: precedence, associativity, functions, IEEE arithmetic, and hostile input."""

from __future__ import annotations

import math
import time

import pytest

from alertd.rules.expr import MAX_DEPTH, MAX_LENGTH, MAX_NAMES, ExprError, parse_expr

NAN, INF = math.nan, math.inf


def holds(text: str, *values: float) -> bool:
    return parse_expr(text).test(values)


def value_of(text: str, *values: float) -> float:
    return parse_expr(text).value(values)


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("a + b * c == 7", (1, 2, 3), True),  # * before +
        ("(a + b) * c == 9", (1, 2, 3), True),
        ("a - b - c == -4", (1, 2, 3), True),  # left-associative: (1 - 2) - 3
        ("a / b / c == 0.125", (1, 2, 4), True),  # (1 / 2) / 4
        ("a - -b == 3", (1, 2), True),  # unary minus
        ("-a * -b == 2", (1, 2), True),
        ("+a == 1", (1,), True),
        ("a > 0 or b > 0 and c > 5", (1, 0, 0), True),  # and before or
        ("(a > 0 or b > 0) and c > 5", (1, 0, 0), False),
        ("not a > 1", (0,), True),  # not is looser than a comparison
        ("not a > 1 and b > 1", (0, 2), True),  # (not a > 1) and b > 1
        ("not not a > 1", (2,), True),
        ("a >= 1 and a <= 1 and a == 1 and a != 2 and a < 2 and a > 0", (1,), True),
        ("abs(a) == 3", (-3,), True),
        ("min(a, b) == 1 and max(a, b) == 2", (2, 1), True),
        ("isnan(min(a, b))", (NAN, 1), True),  # NaN when either is NaN, whatever the order
        ("isnan(max(a, b))", (1, NAN), True),
        ("isnan(a)", (NAN,), True),
        ("isnan(a)", (INF,), False),
        ("isinf(a) and isinf(b)", (INF, -INF), True),
        ("isfinite(a)", (1e308,), True),
        ("isfinite(a)", (NAN,), False),
        ("1.5e1 == a and .5 == b and 2. == c", (15, 0.5, 2), True),
    ],
)
def test_precedence_associativity_and_functions(text: str, values: tuple[float, ...], expected: bool) -> None:
    assert holds(text, *values) is expected


def test_names_in_order_of_first_use_bare_or_backquoted() -> None:
    e = parse_expr("`eval/loss` / train_loss > 1.5 and gpu.utilization < 90 and not isnan(`eval/loss`)")
    assert e.names == ("eval/loss", "train_loss", "gpu.utilization")
    assert holds("`eval/loss` / `train/loss` > 1.5", 3.1, 2.0)
    assert not holds("`eval/loss` / `train/loss` > 1.5", 2.9, 2.0)
    globs = parse_expr("`*val*loss` > `train/*`")
    assert [g is not None for g in globs.globs] == [True, True]
    assert globs.globs[0] is not None and globs.globs[0].fullmatch("eval/val_loss")


def test_nan_and_inf_spellings() -> None:
    assert holds("a < Inf and a > -inf and b == inf and c == -Inf", 1, INF, -INF)
    assert holds("isnan(NaN + a) and isnan(nan)", 1)
    assert not holds("a == NaN", NAN)


def test_division_by_zero_is_ieee_never_an_error() -> None:
    assert value_of("a / b > 0", 1, 0) == INF
    assert value_of("a / b < 0", -1, 0) == -INF
    assert value_of("a / b < 0", 1, -0.0) == -INF
    assert math.isnan(value_of("a / b > 0", 0, 0))
    assert math.isnan(value_of("a / b > 0", NAN, 0))
    assert value_of("a * b > 0", 1e308, 10) == INF  # overflow is Inf, not an exception
    assert math.isnan(value_of("a - b > 0", INF, INF))


def test_every_comparison_with_nan_is_false_not_equal_included() -> None:
    for op in (">", ">=", "<", "<=", "==", "!="):
        assert not holds(f"a {op} 1", NAN), op
        assert not holds(f"1 {op} a", NAN), op
    assert holds("not a > 1", NAN)  # a test can still be negated


def test_the_value_is_the_left_side_of_the_first_comparison() -> None:
    assert value_of("`eval/loss` / `train/loss` > 1.5", 3, 2) == 1.5
    assert value_of("a > 1 and b > 2", 5, 7) == 5
    assert value_of("not (a - b > 1) or b > 2", 5, 7) == -2
    assert math.isnan(value_of("isnan(a)", NAN))
    assert value_of("isinf(a * 2)", 3) == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a + b", "must be a test"),
        ("a", "must be a test"),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("1 > 0", "names no metric"),
        ("a < b < c", "column 7: comparisons don't chain"),
        ("a > 1 +", "column 8: expected a number, a name, a function or '(', found the end"),
        ("a > 1)", "column 6: unexpected ')'"),
        ("(a > 1", "expected ')'"),
        ("a b > 1", "column 3: unexpected 'b'"),
        ("a && b", "column 3: '&&' is not an operator here: use and"),
        ("a > 1 || b > 1", "use or"),
        ("!(a > 1)", "use not"),
        ("a = 1", "use =="),
        ("a ** 2 > 1", "'**' is not an operator here"),
        ("a > 1 and 2", "column 7: `and` takes tests"),
        ("not 1", "`not` takes tests"),
        ("abs(a > 1) > 0", "`abs()` takes numbers, not a test"),
        ("(a > 1) + 1 > 0", "`+` takes numbers"),
        ("isnan(a, b)", "isnan() takes 1 argument, got 2"),
        ("min(a) > 0", "min() takes 2 arguments, got 1"),
        ("foo(a) > 1", "column 4: unexpected '('"),
        ("`eval/loss > 1", "column 1: a backquoted name is not closed"),
        ("`` > 1", "a backquoted name has 1 to 256 characters"),
        ("train/loss > 1", "write the metric name in backquotes (`train/loss`)"),
        ("a > 'x'", 'unexpected character "\'"'),
        ('__import__("os").system("true") > 1', "column 12: unexpected character"),
        ("a $ b", "unexpected character '$'"),
    ],
)
def test_errors_say_what_and_where(text: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert message in str(info.value)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(ExprError, match="expr is a string"):
        parse_expr(5)
    with pytest.raises(ExprError, match="expr is a string"):
        parse_expr({"a": 1})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(" * 10_000 + "a > 1" + ")" * 10_000, f"at most {MAX_LENGTH}"),
        ("a > " + "1" * (1 << 20), f"at most {MAX_LENGTH}"),
        ("(" * 900 + "a > 1" + ")" * 900, f"nests deeper than {MAX_DEPTH} levels"),
        ("-" * 1900 + "a > 1", f"nests deeper than {MAX_DEPTH} levels"),
        ("not " * 400 + "a > 1", f"nests deeper than {MAX_DEPTH} levels"),
        ("abs(" * 300 + "a" + ")" * 300 + " > 1", f"nests deeper than {MAX_DEPTH} levels"),
        ("a" + " + a" * 200 + " > 1", f"nests deeper than {MAX_DEPTH} levels"),
        ("a > 0" + " or a > 0" * 100, f"nests deeper than {MAX_DEPTH} levels"),
        (" + ".join(f"m{i}" for i in range(MAX_NAMES + 1)) + " > 0", f"more than {MAX_NAMES} metric names"),
    ],
)
def test_hostile_input_is_a_clear_error_quickly_never_a_recursion_error(text: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert message in str(info.value)
    assert time.perf_counter() - started < 2.0  # generous: it is linear in the (bounded) length


def test_the_bounds_still_allow_real_expressions() -> None:
    deep = "(" * (MAX_DEPTH - 2) + "a > 1" + ")" * (MAX_DEPTH - 2)
    assert holds(deep, 2)
    chain = " + ".join(f"m{i}" for i in range(MAX_NAMES)) + f" == {MAX_NAMES}"
    assert holds(chain, *([1.0] * MAX_NAMES))


def test_an_expression_is_never_evaluated_by_python() -> None:
    # A name that Python would resolve is just a metric name here: its value comes from the run.
    e = parse_expr("__import__ > 1 and os.system < 2")
    assert e.names == ("__import__", "os.system")
    assert e.test((2.0, 1.0))
