"""What the HTTP API sees of the service: read-only views, one per resource, that `alertd.service.Service`
implements (and a test may fake). The API reads the engine and the stores through these and changes nothing
but through the silences and `reload`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from alertd.buffer import SeriesBuffer
    from alertd.clock import Clock
    from alertd.config import Config
    from alertd.dispatch.dispatcher import Dispatcher
    from alertd.dispatch.silences import SilenceStore
    from alertd.health import SourceHealth
    from alertd.model import Transition
    from alertd.rules.evaluate import EvalState, RuleSet
    from alertd.runs.tracker import RunTracker
    from alertd.sources.base import Source


class EngineView(Protocol):
    """The buffer, the rules and their state."""

    @property
    def config(self) -> Config: ...
    @property
    def buffer(self) -> SeriesBuffer: ...
    @property
    def ruleset(self) -> RuleSet: ...
    @property
    def state(self) -> EvalState: ...
    @property
    def runs(self) -> RunTracker: ...
    @property
    def rule_errors(self) -> Mapping[str, str]: ...
    @property
    def last_eval(self) -> float | None: ...
    @property
    def eval_seconds(self) -> float: ...


class AlertsView(Protocol):
    """Alerts, rules, series and runs (`/api/v1/alerts`, `rules`, `series`, `runs`, the run plot, `/metrics`)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def config(self) -> Config: ...
    @property
    def engine(self) -> EngineView: ...
    @property
    def transition_log(self) -> Sequence[Transition]: ...
    @property
    def started_at(self) -> float | None: ...


class SourcesView(Protocol):
    """The sources and their health (`/api/v1/sources`, `/metrics`)."""

    @property
    def config(self) -> Config: ...
    @property
    def sources(self) -> Mapping[str, Source]: ...
    @property
    def health(self) -> Mapping[str, SourceHealth]: ...
    @property
    def watching(self) -> Mapping[str, str]: ...


class DeliveryView(Protocol):
    """The dispatcher (its routes, its counters: `/metrics`, `/api/v2/status`)."""

    @property
    def dispatcher(self) -> Dispatcher | None: ...


class SilencesView(Protocol):
    """The silences, the one store the API changes (`/api/v1/silences`, `/api/v2/silences`)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def silences(self) -> SilenceStore: ...


class AdminView(Protocol):
    """Readiness and reload (`/readyz`, `POST /api/v1/reload`)."""

    @property
    def ready(self) -> bool: ...

    async def reload(self) -> list[str]: ...


class ServiceView(AlertsView, SourcesView, DeliveryView, SilencesView, AdminView, Protocol):
    """All of it: what `create_app` takes."""
