"""Several rules files -> one `Config`: duplicates across files, receivers that aren't defined, windows the
buffer can't hold; then the rules compiled."""

from __future__ import annotations

from collections.abc import Mapping

from alertd.buffer import BufferLimits
from alertd.config.compiled import DEFAULT_RECEIVER, Config
from alertd.config.places import doc_named, problem_at
from alertd.config.rulesfile import (
    BufferConfig,
    DeliveryConfig,
    ExecConfig,
    ExportConfig,
    RuleConfig,
    RulesFile,
    RunsConfig,
)
from alertd.config.severities import _check_severities
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig, check_time_intervals
from alertd.errors import ConfigError, Problem
from alertd.notify.config import LogConfig
from alertd.receivers import NotifierConfig
from alertd.rules.conditions import Condition, Span, Spike, WindowAggregate, ZScore
from alertd.sources.config import SourceConfig
from alertd.yamlfile import Document


def _merge(parsed: list[tuple[Document, RulesFile]], files: tuple[str, ...]) -> Config:
    problems: list[Problem] = []
    rules: dict[str, tuple[str, int, RuleConfig]] = {}
    sources: dict[str, SourceConfig] = {}
    notifiers: dict[str, NotifierConfig] = {}
    route: tuple[str, RouteConfig] | None = None
    inhibit: list[InhibitRuleConfig] = []
    buffer, interval, runs = BufferConfig(), 1.0, RunsConfig()
    delivery, export, exec_ = DeliveryConfig(), ExportConfig(), ExecConfig()
    for doc, model in parsed:
        for i, src in enumerate(model.sources):
            if src.name in sources:
                problems.append(problem_at(doc, ("sources", i, "name"), f"duplicate source name {src.name!r}"))
            sources[src.name] = src
        for name, cfg in model.notifiers.items():
            if name in notifiers:
                problems.append(problem_at(doc, ("notifiers", name), f"notifier {name!r} is defined twice"))
            notifiers[name] = cfg
        for i, rule in enumerate(model.rules):
            if rule.name in rules:
                first = rules[rule.name]
                problems.append(
                    problem_at(
                        doc,
                        ("rules", i, "name"),
                        f"duplicate rule name {rule.name!r} (first in {first[0]} rules[{first[1]}])",
                    )
                )
            rules[rule.name] = (doc.file, i, rule)
        if model.route is not None:
            if route is not None:
                problems.append(problem_at(doc, ("route",), f"route is already defined in {route[0]}; give it once"))
            route = (doc.file, model.route)
        inhibit.extend(model.inhibit_rules)
        buffer = model.buffer or buffer
        interval = model.evaluation_interval or interval
        runs = model.runs or runs
        delivery = model.delivery or delivery
        export = model.export or export
        exec_ = model.exec or exec_
    if not notifiers:
        notifiers[DEFAULT_RECEIVER] = LogConfig(type="log")
    root = route[1] if route else RouteConfig(receivers=sorted(notifiers))
    problems += check_time_intervals(parsed, root, lambda file, loc, msg: problem_at(doc_named(parsed, file), loc, msg))
    problems += _check_receivers(parsed, root, rules, notifiers)
    problems += _check_windows(parsed, rules, buffer)
    if problems:
        raise ConfigError(problems)
    warnings = _check_severities(parsed, rules)
    return Config(
        files=files,
        rules=tuple(r.build() for _, _, r in rules.values()),
        sources=tuple(sources.values()),
        notifiers=notifiers,
        route=root,
        inhibit_rules=tuple(inhibit),
        buffer=BufferLimits(
            buffer.max_samples,
            buffer.max_age,
            buffer.max_series,
            buffer.max_series_per_source,
            {s.name: s.max_series for s in sources.values() if s.max_series is not None},
            buffer.max_future_skew,
        ),
        evaluation_interval=interval,
        rule_configs={name: r for name, (_, _, r) in rules.items()},
        stall_after=runs.stall_after,
        max_retry_after=delivery.max_retry_after,
        max_notifications_per_flush=delivery.max_notifications_per_flush,
        export=export,
        restart=exec_.restart.build() if exec_.restart is not None else None,
        checkpoints=exec_.checkpoints,
        rule_files={name: file for name, (file, _, _) in rules.items()},
        warnings=tuple(warnings),
    )


def _check_receivers(
    parsed: list[tuple[Document, RulesFile]],
    root: RouteConfig,
    rules: Mapping[str, tuple[str, int, RuleConfig]],
    notifiers: Mapping[str, NotifierConfig],
) -> list[Problem]:
    problems = []
    known = ", ".join(sorted(notifiers))
    for file, i, rule in rules.values():
        for j, name in enumerate(rule.notify):
            if name not in notifiers:
                problems.append(
                    problem_at(
                        doc_named(parsed, file),
                        ("rules", i, "notify", j),
                        f"no notifier named {name!r} (defined: {known})",
                    )
                )
    route_file = next((d.file for d, m in parsed if m.route is not None), None)

    def walk(node: RouteConfig, loc: tuple[str | int, ...]) -> None:
        for j, name in enumerate(node.receiver_list() or []):
            if name not in notifiers:
                where = (
                    problem_at(
                        doc_named(parsed, route_file),
                        (*loc, "receiver") if node.receiver is not None else (*loc, "receivers", j),
                        f"no notifier named {name!r} (defined: {known})",
                    )
                    if route_file
                    else Problem("", "route", f"no notifier named {name!r}")
                )
                problems.append(where)
        for k, child in enumerate(node.routes):
            walk(child, (*loc, "routes", k))

    walk(root, ("route",))
    return problems


def _check_windows(
    parsed: list[tuple[Document, RulesFile]], rules: Mapping[str, tuple[str, int, RuleConfig]], buffer: BufferConfig
) -> list[Problem]:
    problems = []
    for file, i, rule in rules.values():
        cond = rule.condition
        if isinstance(cond, Spike):
            if cond.samples is not None and cond.samples >= buffer.max_samples:
                msg = (
                    f"a baseline of {cond.samples} samples needs buffer.max_samples above it (now {buffer.max_samples})"
                )
                problems.append(problem_at(doc_named(parsed, file), ("rules", i, "condition"), msg))
            if cond.seconds is not None and cond.seconds > buffer.max_age:
                msg = f"the baseline of {cond.seconds:g}s is longer than buffer.max_age ({buffer.max_age:g}s)"
                problems.append(problem_at(doc_named(parsed, file), ("rules", i, "condition"), msg))
        need = _window_needs(cond)
        if need is not None and need[0] > buffer.max_samples:
            msg = f"{need[2]} needs buffer.max_samples of at least {need[0]} (now {buffer.max_samples})"
            problems.append(problem_at(doc_named(parsed, file), ("rules", i, "condition"), msg))
        if need is not None and need[1] > buffer.max_age:
            msg = f"{need[2]} reaches back {need[1]:g}s, longer than buffer.max_age ({buffer.max_age:g}s)"
            problems.append(problem_at(doc_named(parsed, file), ("rules", i, "condition"), msg))
        if rule.consecutive > buffer.max_samples:
            problems.append(
                problem_at(doc_named(parsed, file), ("rules", i, "consecutive"), "more than buffer.max_samples")
            )
    return problems


def _window_needs(cond: Condition) -> tuple[int, float, str] | None:
    """What a windowed condition needs the buffer to hold: samples, seconds, and the window's words."""
    if isinstance(cond, WindowAggregate):
        spans = (cond.over, cond.baseline) if cond.baseline is not None else (cond.over,)
        words = "the window" if cond.baseline is None else "the window and its baseline"
    elif isinstance(cond, ZScore):
        spans, words = (cond.over, Span(samples=1) if cond.over.samples is not None else Span(seconds=0.0)), "zscore"
    else:
        return None
    return sum(s.samples or 0 for s in spans), sum(s.seconds or 0.0 for s in spans), words
