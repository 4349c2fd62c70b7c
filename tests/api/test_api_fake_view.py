"""The API over a fake view of the service (`alertd.api.view.ServiceView`), served by uvicorn on 127.0.0.1: no
sources, no state directory, no dispatcher; the engine is the real core (buffer, rules, evaluation) driven by
hand. What the routes need of the service is the view, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from api_helpers import serving_api

from alertd.buffer import SeriesBuffer
from alertd.clock import FakeClock
from alertd.config import Config, load_config
from alertd.dispatch.dispatcher import Dispatcher
from alertd.dispatch.silences import SilenceStore
from alertd.health import SourceHealth
from alertd.model import Sample, SeriesKey, Transition, make_labels
from alertd.rules.evaluate import RuleSet
from alertd.service.engine import Engine
from alertd.sources.base import Source

pytestmark = pytest.mark.anyio
T0 = 1_767_225_600.0
RULES = "rules:\n  - {name: loss_nan, metric: train/loss, condition: nonfinite, severity: critical}\n"


@dataclass
class FakeService:
    """Only what `ServiceView` names: the routes can't reach anything else."""

    config: Config
    engine: Engine
    clock: FakeClock
    silences: SilenceStore
    transition_log: list[Transition] = field(default_factory=list)
    started_at: float | None = T0
    sources: dict[str, Source] = field(default_factory=dict)
    health: dict[str, SourceHealth] = field(default_factory=dict)
    watching: dict[str, str] = field(default_factory=dict)
    dispatcher: Dispatcher | None = None
    ready: bool = True
    reloads: int = 0

    async def reload(self) -> list[str]:
        self.reloads += 1
        return ["rules.yaml:2: rules[0].condition: unknown condition 'nonfinit'"]


def fake(tmp_path: Path) -> FakeService:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    config = load_config([str(path)])
    engine = Engine(config, SeriesBuffer(config.buffer), RuleSet(config.rules))
    return FakeService(config, engine, FakeClock(T0), SilenceStore())


async def test_the_routes_serve_a_fake_view_alerts_rules_silences_readiness_and_reload(tmp_path: Path) -> None:
    view = fake(tmp_path)
    key = SeriesKey("train/loss", make_labels({"run": "exp1", "source": "runs"}))
    async with serving_api(view) as client:
        assert (await client.get("/api/v1/alerts", params={"format": "alertd"})).json() == []

        view.engine.buffer.append([Sample(key, T0, 7, float("nan"))], T0)
        view.transition_log.extend(view.engine.evaluate(T0).transitions)
        (alert,) = (await client.get("/api/v1/alerts", params={"format": "alertd"})).json()
        assert (alert["rule"], alert["state"], alert["value"], alert["step"]) == ("loss_nan", "firing", "NaN", 7)
        assert alert["labels"] == {"metric": "train/loss", "run": "exp1", "source": "runs"}

        (rule,) = (await client.get("/api/v1/rules", params={"format": "alertd"})).json()
        assert (rule["name"], rule["condition"], rule["alerts"]) == (
            "loss_nan",
            "nonfinite",
            {"pending": 0, "firing": 1},
        )

        body = {"matchers": [{"name": "run", "value": "exp1"}], "duration": "1h", "createdBy": "a", "comment": "c"}
        created = await client.post("/api/v1/silences", json=body)
        assert created.status_code == 200, created.text
        assert [s.id for s in view.silences.list()] == [created.json()["id"]]  # the one store the API changes
        (alert,) = (await client.get("/api/v1/alerts", params={"format": "alertd"})).json()
        assert alert["silenced"] is True

        reload = await client.post("/api/v1/reload", json={})
        assert view.reloads == 1 and "unknown condition" in reload.text

        assert (await client.get("/readyz")).status_code == 200
        view.ready = False
        assert (await client.get("/readyz")).status_code == 503
