"""The `alertd` command: run (the default), check, test, dry-run."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pydantic import TypeAdapter, ValidationError

from alertd import __version__, progress
from alertd.columns import ColumnList
from alertd.config import Config, load_config
from alertd.dryrun import dumps, replay, root_run_name, transition_text
from alertd.durations import parse_duration
from alertd.errors import ConfigError, SourceError
from alertd.model import Sample, Transition
from alertd.progress import MessageHandler, Progress
from alertd.rules.evaluate import RuleSet
from alertd.sources.config import SourceConfig
from alertd.sources.registry import REPLAYABLE, build_source
from alertd.sources.samples import read_samples
from alertd.sources.textlog import TextLogSource

if TYPE_CHECKING:
    from alertd.runs.recovery_replay import Recoveries, Replayed
    from alertd.service.exec import RestartOverrides

COMMANDS = ("run", "exec", "check", "test", "dry-run")


class CliError(Exception):
    """A problem the command reports on one line and exits 1 for."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in (*COMMANDS, "-h", "--help", "--version"):
        args.insert(0, "run")
    ns = _parser().parse_args(args)
    handler = {"run": _run, "exec": _exec, "check": _check, "test": _test, "dry-run": _dry_run}[ns.command]
    try:
        return handler(ns)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `alertd dry-run ... | head`: the reader has gone, as for any Unix filter
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="alertd", description="Alerts for machine-learning training runs.")
    p.add_argument("--version", action=_Version, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the service until SIGINT/SIGTERM (the default command)")
    run.add_argument("--rules", action="append", required=True, metavar="FILE", help="rules file (repeatable)")
    run.add_argument("--listen", default=None, metavar="HOST:PORT", help="serve the HTTP API (default: off)")
    run.add_argument("--state-dir", default=None, help="where the outbox and state live (env ALERTD_STATE_DIR)")
    run.add_argument("--log-format", choices=("auto", "json", "text"), default="auto")
    ex = sub.add_parser(
        "exec",
        help="run a trainer as alertd's child, watched; exit with its status",
        usage="alertd exec [--rules FILE ...] [--no-stop] [--listen HOST:PORT] [--run NAME] [--state-dir DIR] "
        "[--restart-on crashed,lost] [--max-restarts N] [--restart-backoff 30s] [--checkpoints DIR] "
        "-- COMMAND [ARG ...]",
    )
    ex.add_argument("--rules", action="append", metavar="FILE", help="rules file (repeatable; default: the built-in)")
    ex.add_argument("--listen", default=None, metavar="HOST:PORT", help="serve the HTTP API (default: off)")
    ex.add_argument("--run", default=None, metavar="NAME", help="the run label of the child's output")
    ex.add_argument("--state-dir", default=None, help="where the outbox and state live (env ALERTD_STATE_DIR)")
    ex.add_argument("--log-format", choices=("auto", "json", "text"), default="auto")
    ex.add_argument(
        "--no-stop",
        action="store_true",
        help="with the built-in rules: only tell, never stop the child (default: a non-finite loss stops it)",
    )
    ex.add_argument(
        "--restart-on",
        default=None,
        metavar="crashed,lost",
        help="start the child again when it ended so (default with any restart flag: crashed,lost; "
        "never after a CUDA OOM, a user's interrupt, alertd's own stop); over the rules file's exec.restart",
    )
    ex.add_argument("--max-restarts", type=int, default=None, metavar="N", help="restarts at most (0: none)")
    ex.add_argument("--restart-backoff", default=None, metavar="DURATION", help="wait before a restart (default 30s)")
    ex.add_argument(
        "--checkpoints",
        default=None,
        metavar="DIR",
        help="the trainer's output directory, whose checkpoint ledger a restart resumes from (ALERTD_RESUME_FROM)",
    )
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]")
    check = sub.add_parser("check", help="validate rules files")
    check.add_argument("files", nargs="+", metavar="FILE")
    test = sub.add_parser("test", help="run rule unit tests")
    test.add_argument("files", nargs="+", metavar="FILE")
    dry = sub.add_parser("dry-run", help="replay recorded data through the rules; sends nothing")
    dry.add_argument("--rules", action="append", required=True, metavar="FILE")
    dry.add_argument("--source", action="append", default=[], metavar="TYPE:LOCATION", help=_SOURCE_HELP)
    dry.add_argument("--format", choices=("text", "json"), default="text")
    dry.add_argument("--until", default=None, help="evaluate up to this RFC 3339 time or epoch second")
    dry.add_argument("--quiet", action="store_true", help="no progress bar (drawn only when stderr is a terminal)")
    dry.add_argument(
        "--plot",
        default=None,
        metavar="OUT",
        help="also draw a run (its series, where each rule was pending and firing) to OUT: .html, .svg or .png",
    )
    dry.add_argument("--run", default=None, metavar="RUN", help="the run --plot draws (RUN or SOURCE:RUN)")
    dry.add_argument(
        "--checkpoints",
        default=None,
        metavar="DIR",
        help="the checkpoint ledger's directory for `recover` notifiers without checkpoints: (default: each "
        "samples file's directory)",
    )
    dry.add_argument(
        "--x",
        choices=("step", "time"),
        default=None,
        help="the x axis of --plot: the training step (default) or time; series without steps are drawn over time",
    )
    return p


class _Version(argparse.Action):
    """`--version`: the version of the installed distribution (looked up only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"alertd {installed_version()}")
        parser.exit()


def installed_version() -> str:
    """The installed `alertd` distribution's version; `alertd.__version__` when run from a tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("alertd")
    except PackageNotFoundError:
        return __version__


_SOURCE_HELP = (
    "tensorboard:DIR, wandb_dir:DIR, samples:FILE.jsonl, textlog:FILE_OR_GLOB, csv:FILE_OR_GLOB, "
    "mlflow:DIR_OR_URI or wandb:ENTITY/PROJECT[/RUN_ID] (repeatable)"
)


def _check(ns: argparse.Namespace) -> int:
    status = 0
    for path in ns.files:
        try:
            cfg = load_config([path])
        except ConfigError as exc:
            for problem in exc.problems:
                print(f"error: {problem}")
            status = 1
            continue
        for warning in cfg.warnings:
            print(f"warning: {warning}")
        print(f"{path}: ok ({len(cfg.rules)} rules, {len(cfg.sources)} sources, {len(cfg.notifiers)} notifiers)")
    return status


def _test(ns: argparse.Namespace) -> int:
    from alertd.ruletest import run_test_file

    passed = failed = refused = 0
    status = 0
    for path in ns.files:
        outcome = run_test_file(path)
        passed += outcome.passed
        failed += len(outcome.failures)
        refused += len(outcome.refused)
        for failure in outcome.failures:
            print(failure)
        for note in outcome.notes:
            print(f"note: {note}")
        for line in outcome.refused:
            print(f"NOT RUN {line}")
        summary = f"{path}: {outcome.passed} passed, {len(outcome.failures)} failed"
        if outcome.refused:
            summary += f", {len(outcome.refused)} not run (promql_expr_test: alertd's rules are not PromQL)"
            if not outcome.checks:
                summary += "; no alert test ran, so this file fails"
                status = 1
        print(summary)
    if len(ns.files) > 1:
        print(f"total: {passed} passed, {failed} failed" + (f", {refused} not run" if refused else ""))
    return 1 if failed else status


def _dry_run(ns: argparse.Namespace) -> int:
    cfg = load_config(ns.rules)
    for warning in cfg.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    until = _parse_until(ns.until)
    if ns.plot is not None:
        from alertd.plot.output import PlotError, plot_format

        try:
            plot_format(ns.plot)
        except PlotError as exc:
            raise CliError(str(exc)) from None
    elif ns.run is not None or ns.x is not None:
        raise CliError(f"{'--run' if ns.run is not None else '--x'} is for --plot: give --plot OUT too")
    bar = None if ns.quiet else Progress.for_terminal(sys.stderr)
    kept: list[Transition] = []
    plans: list[Replayed] = []
    with _showing(bar):
        dirs: dict[tuple[str, str], str] = {}
        samples = _collect(cfg, ns.source, bar, dirs)
        recoveries = _recoveries(cfg, ns.checkpoints, dirs)
        fed = bar.evaluated if bar is not None else None
        shared = bar is not None and _isatty(sys.stdout)  # the results go to the bar's terminal: erase it first
        for t in replay(RuleSet(cfg.rules), samples, cfg.buffer, until, cfg.stall_after, fed):
            if shared and bar is not None:
                bar.clear()
            print(dumps(t) if ns.format == "json" else transition_text(t), flush=shared)
            for r in recoveries.after(t) if recoveries is not None else ():
                print(_recover_json(r) if ns.format == "json" else r.text(), flush=shared)
                plans.append(r)
            if ns.plot is not None:
                kept.append(t)
        if bar is not None:
            bar.finish_phase()
    sys.stdout.flush()
    if ns.plot is not None:
        _write_plot(ns.plot, ns.run, samples, kept, ns.x or "step", plans)
    return 0


def _recoveries(cfg: Config, checkpoints: str | None, dirs: dict[tuple[str, str], str]) -> Recoveries | None:
    """What the `recover` notifiers would have done, over the replay's transitions: None without one. Each one's
    ledger is in its `checkpoints:` directory, else in `--checkpoints DIR`, else beside the run's samples file."""
    from alertd.actions.config import RecoverConfig
    from alertd.actions.recover import ledger_dir
    from alertd.errors import NotifyError
    from alertd.runs.recovery_replay import Recoveries, route_receivers

    recover = {name: n for name, n in cfg.notifiers.items() if isinstance(n, RecoverConfig)}
    if not recover:
        return None
    read: dict[str, list[dict[str, object]] | str] = {}

    def ledger(notifier: str, source: str, run: str) -> list[dict[str, object]] | str:
        try:
            named = ledger_dir(notifier, recover[notifier], {"source": source, "run": run})
        except NotifyError as exc:
            return str(exc)
        where = named or checkpoints or dirs.get((source, run))
        if where is None:
            why = "give the notifier checkpoints: DIR, or dry-run --checkpoints DIR"
            return f"no checkpoint ledger for run {run!r}: {why}"
        if where not in read:
            read[where] = _read_ledger(where)
        return read[where]

    return Recoveries(route_receivers(cfg.route.to_route()), {n: c.policy() for n, c in recover.items()}, ledger)


def _read_ledger(where: str) -> list[dict[str, object]] | str:
    from alertd.integrations.ledger import ledger_path, read

    path = ledger_path(where)
    if not os.path.isfile(path):
        return f"no checkpoint ledger at {path}"
    return list(read(where))


def _recover_json(r: Replayed) -> str:
    return json.dumps({"recover": r.as_json()}, separators=(", ", ": "))


def _write_plot(
    path: str,
    run: str | None,
    samples: list[Sample],
    transitions: list[Transition],
    x: str = "step",
    recoveries: Sequence[Replayed] = (),
) -> None:
    from alertd.plot.output import PlotError, render
    from alertd.plot.png import PlotUnavailable

    try:
        body, note = render(samples, transitions, path, run, x, recoveries)
    except (PlotError, PlotUnavailable) as exc:
        raise CliError(str(exc)) from None
    try:
        with open(path, "wb") as f:
            f.write(body)
    except OSError as exc:
        raise CliError(f"can't write {path}: {exc.strerror or exc}") from exc
    if note:
        print(note, file=sys.stderr)


@contextmanager
def _showing(bar: Progress | None) -> Iterator[None]:
    """While the block runs: the readers report to `bar`, and warnings are printed above it; the bar is
    erased at the end (an error too). Nothing at all without a bar."""
    if bar is None:
        yield
        return
    handler = MessageHandler(bar)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with progress.observing(bar):
            yield
    finally:
        root.removeHandler(handler)
        bar.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _note(bar: Progress | None, text: str) -> None:
    """A line on stderr (above the progress bar, when one is drawn)."""
    if bar is not None:
        bar.message(text)
    else:
        print(text, file=sys.stderr)


def _parse_until(text: str | None) -> float | None:
    if text is None:
        return None
    from alertd.sources.samples import parse_time

    try:
        return parse_time(float(text))
    except ValueError:
        pass
    try:
        return parse_time(text)
    except ValueError as exc:
        raise CliError(f"--until: {exc}") from None


_SIZED_UP_FRONT = ("tensorboard", "wandb_dir", "samples", "textlog", "csv")
"""Source types whose readers tell the sizes of all their files before reading them: the progress bar has a
total and an ETA. The APIs (wandb, mlflow over HTTP) and an MLflow store (runs found while read) have neither."""


def _collect(
    cfg: Config, specs: Sequence[str], bar: Progress | None = None, dirs: dict[tuple[str, str], str] | None = None
) -> list[Sample]:
    """The samples of the sources; `dirs`, where given, gets the directory of each samples file by the (source,
    run) of its samples (where a `recover` notifier's ledger is, by default)."""
    configs = [_source_from_spec(cfg, spec) for spec in specs] if specs else list(cfg.sources)
    out: list[Sample] = ColumnList()  # with the columns a source's reads come with (`alertd.columns`)
    for src in configs:
        if src.type not in REPLAYABLE:
            _note(bar, f"note: source {src.name!r} ({src.type}) has no history to replay; skipped")
            continue
        if bar is not None:
            label = src.name if src.name == src.type else f"{src.name} ({src.type})"
            bar.reading(label, total_known=src.type in _SIZED_UP_FRONT)
        if src.type == "samples":
            got = _read_samples_file(src.path, src.name, bar)
            if dirs is not None:
                where = os.path.dirname(os.path.abspath(src.path))
                for key in _runs(got):
                    dirs.setdefault(key, where)
            out += got
        elif src.type == "tensorboard":  # a run directory given as the logdir: its run is named, not `.`
            out += asyncio.run(_poll_all(src, bar, root_run_name(src.logdir)))
        else:
            out += asyncio.run(_poll_all(src, bar))
        if bar is not None:
            bar.finish_phase()
    return out


def _runs(samples: Sequence[Sample]) -> dict[tuple[str, str], None]:
    return {(s.series.label("source") or "", s.series.label("run") or ""): None for s in samples}


def _read_samples_file(path: str, name: str, bar: Progress | None = None) -> list[Sample]:
    out: list[Sample] = []
    try:
        for item in read_samples(path, name):
            if isinstance(item, Sample):
                out.append(item)
            else:
                _note(bar, f"warning: {path}:{item[0]}: skipped: {item[1]}")
    except OSError as exc:
        raise CliError(f"can't read {path}: {exc.strerror or exc}") from exc
    return out


_MAX_POLLS = 100_000
"""Polls of one source in a dry-run, at most: a source `behind` after a poll (a TensorBoard event file
longer than one poll reads) is polled again until it has read everything there was."""


async def _poll_all(cfg: SourceConfig, bar: Progress | None = None, root_run: str | None = None) -> list[Sample]:
    source = build_source(cfg, root_run)
    try:
        out: list[Sample] = ColumnList()
        out += await source.poll(time.time())
        for _ in range(_MAX_POLLS):
            if not getattr(source, "behind", False):
                break
            out += await source.poll(time.time())
        if isinstance(source, TextLogSource):  # a log none of whose lines gave anything: say so, not silence
            for path, lines in source.unmatched():
                _note(bar, f"note: source {cfg.name!r}: {source.unmatched_text(path, lines)}")
        return out
    except SourceError as exc:
        raise CliError(f"source {cfg.name!r}: {exc}") from exc
    finally:
        await source.aclose()


def _source_from_spec(cfg: Config, spec: str) -> SourceConfig:
    kind, sep, location = spec.partition(":")
    if not sep or not location:
        raise SystemExit(f"alertd: error: --source wants TYPE:LOCATION, got {spec!r} ({_SOURCE_HELP})")
    name = next((s.name for s in cfg.sources if s.type == kind), kind)
    known: dict[str, dict[str, object]] = {
        "tensorboard": {"logdir": location},
        "wandb_dir": {"path": location},
        "samples": {"path": location},
        "textlog": {"path": location},
        "csv": {"path": location},
        "mlflow": {"tracking_uri": location, "runs": "all"},
    }
    fields = known.get(kind)
    if kind == "wandb":
        parts = location.split("/")
        fields = {"project": "/".join(parts[:2]), "runs": [parts[2]] if len(parts) == 3 else "all"}
    if fields is None:
        raise SystemExit(f"alertd: error: unknown source type {kind!r} ({_SOURCE_HELP})")
    try:
        adapter: TypeAdapter[SourceConfig] = TypeAdapter(SourceConfig)
        return adapter.validate_python({"type": kind, "name": name, **fields})
    except ValidationError as exc:
        raise SystemExit(f"alertd: error: --source {spec!r}: {exc.errors()[0]['msg']}") from exc


def _exec(ns: argparse.Namespace) -> int:
    from alertd.service.exec import run_exec

    command = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    if not command:
        raise CliError("alertd exec needs a command: alertd exec [--rules FILE] -- python train.py")
    if ns.rules and ns.no_stop:
        raise CliError("--no-stop is for the built-in rules: with --rules, the rules file says what acts")
    rules = ns.rules or [str(default_rules())]
    status: int = run_exec(
        command,
        rules,
        run=ns.run,
        listen=ns.listen,
        state_dir=ns.state_dir,
        log_format=ns.log_format,
        stop=not ns.rules and not ns.no_stop,
        restart=_restart_flags(ns),
        checkpoints=ns.checkpoints,
    )
    return status


def _restart_flags(ns: argparse.Namespace) -> RestartOverrides:
    """`--restart-on`, `--max-restarts`, `--restart-backoff`, checked."""
    from alertd.runs.restart import RESTARTABLE
    from alertd.service.exec import RestartOverrides

    on = None
    if ns.restart_on is not None:
        on = tuple(w.strip() for w in ns.restart_on.split(",") if w.strip())
        wrong = [w for w in on if w not in RESTARTABLE]
        if wrong or not on:
            raise CliError(f"--restart-on: {', '.join(wrong) or 'nothing'}: give crashed, lost or crashed,lost")
    if ns.max_restarts is not None and ns.max_restarts < 0:
        raise CliError("--max-restarts can't be negative")
    backoff = None
    if ns.restart_backoff is not None:
        try:
            backoff = parse_duration(ns.restart_backoff)
        except ValueError as exc:
            raise CliError(f"--restart-backoff: {exc}") from None
    return RestartOverrides(on, ns.max_restarts, backoff)


def default_rules() -> Path:
    """The rules file shipped with alertd (rules/default.yaml)."""
    return Path(str(resources.files("alertd") / "default.yaml"))


def _run(ns: argparse.Namespace) -> int:
    from alertd.service.main import run_service

    status: int = run_service(ns.rules, listen=ns.listen, state_dir=ns.state_dir, log_format=ns.log_format)
    return status
