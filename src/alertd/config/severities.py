"""Warnings: a rule's severity that looks mistyped (no route, no other rule uses it) and a route or inhibit
matcher on a severity no rule has."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alertd.config.hints import nearest
from alertd.config.places import doc_named, problem_at
from alertd.config.rulesfile import RuleConfig, RulesFile
from alertd.dispatch.matchers import Matcher, MatchOp, parse_matchers
from alertd.dispatch.route_config import RouteConfig
from alertd.errors import Problem
from alertd.yamlfile import Document

SEVERITIES = ("critical", "warning", "info")
"""The severities alertd's own rules use; a rule may use any other word, if a route or another rule does too."""


def _severity_matchers(
    parsed: list[tuple[Document, RulesFile]],
) -> list[tuple[Document, tuple[str | int, ...], Matcher]]:
    """Every matcher on `severity` of the route tree and the inhibit rules, with its file and place."""
    out: list[tuple[Document, tuple[str | int, ...], Matcher]] = []

    def add(
        doc: Document,
        loc: tuple[str | int, ...],
        match: Mapping[str, str],
        match_re: Mapping[str, str],
        texts: Sequence[str],
        names: tuple[str, str, str],
    ) -> None:
        for key, value in match.items():
            out.append((doc, (*loc, names[0], key), Matcher(key, MatchOp.EQ, value)))
        for key, value in match_re.items():
            out.append((doc, (*loc, names[1], key), Matcher(key, MatchOp.RE, value)))
        for i, text in enumerate(texts):
            out.extend((doc, (*loc, names[2], i), m) for m in parse_matchers(text))

    def walk(doc: Document, node: RouteConfig, loc: tuple[str | int, ...]) -> None:
        add(doc, loc, node.match, node.match_re, node.matchers, ("match", "match_re", "matchers"))
        for k, child in enumerate(node.routes):
            walk(doc, child, (*loc, "routes", k))

    for doc, model in parsed:
        if model.route is not None:
            walk(doc, model.route, ("route",))
        for i, inhibit in enumerate(model.inhibit_rules):
            for side in ("source", "target"):
                names = (f"{side}_match", f"{side}_match_re", f"{side}_matchers")
                match, match_re, texts = (getattr(inhibit, n) for n in names)
                add(doc, ("inhibit_rules", i), match, match_re, texts, names)
    return [(doc, loc, m) for doc, loc, m in out if m.name == "severity"]


def _check_severities(
    parsed: list[tuple[Document, RulesFile]], rules: Mapping[str, tuple[str, int, RuleConfig]]
) -> list[Problem]:
    """Warnings: a rule's severity that is none of SEVERITIES and that no matcher and no other rule uses
    (`critcal`), and an equality matcher on a severity no rule has (when there are rules)."""
    matchers = _severity_matchers(parsed)
    matched = {m.value for _, _, m in matchers if m.op is MatchOp.EQ}
    counts: dict[str, int] = {}
    for _, _, rule in rules.values():
        counts[rule.severity] = counts.get(rule.severity, 0) + 1
    out: list[Problem] = []
    for file, i, rule in rules.values():
        sev = rule.severity
        if sev in SEVERITIES or counts[sev] > 1 or any(m.matches({"severity": sev}) for _, _, m in matchers):
            continue
        known = [*SEVERITIES, *sorted(set(counts) - {sev}), *sorted(matched)]
        hint = nearest(sev, known)
        msg = f"severity {sev!r} is used by no route and no other rule" + (
            f"; did you mean {hint!r}?" if hint else f" (the usual ones: {', '.join(SEVERITIES)})"
        )
        out.append(problem_at(doc_named(parsed, file), ("rules", i, "severity"), msg))
    for doc, loc, m in matchers if rules else []:
        if m.op is not MatchOp.EQ or m.value in counts:
            continue
        hint = nearest(m.value, [*counts, *SEVERITIES])
        msg = f"no rule has severity {m.value!r}, so this matcher matches no alert (the rules have: " + (
            f"{', '.join(sorted(counts))})" + (f"; did you mean {hint!r}?" if hint else "")
        )
        out.append(problem_at(doc, loc, msg))
    return out
