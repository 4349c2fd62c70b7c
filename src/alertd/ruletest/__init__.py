"""`alertd test`: rule unit tests that read `promtool test rules` files.

notation  the series notation (`1+1x3`, `_x2`, `stale`) and series names
spec      the test file's keys (promtool's, plus alertd's `steps` and `exp_state`)
compare   expected against actual alerts
runner    runs a file: the evaluation grid, stale markers, refused `promql_expr_test`
"""

from alertd.ruletest.notation import STALE, expand_values, parse_series
from alertd.ruletest.runner import Outcome, run_test_file

__all__ = ["STALE", "Outcome", "expand_values", "parse_series", "run_test_file"]
