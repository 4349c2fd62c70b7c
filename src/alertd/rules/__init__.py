"""Rules: conditions, the alert state machine and evaluate() (pure: no I/O, no clock reads)."""

from alertd.rules.evaluate import EvalState, Evaluation, RuleSet, evaluate
from alertd.rules.rule import LabelMatcher, Rule

__all__ = ["EvalState", "Evaluation", "LabelMatcher", "Rule", "RuleSet", "evaluate"]
