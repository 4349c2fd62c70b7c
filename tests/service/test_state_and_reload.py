"""State across restarts and hot reload, on the service object itself with a fake clock."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from alertd.clock import FakeClock
from alertd.model import AlertState, Sample, SeriesKey, make_labels
from alertd.service import Service

RULES = """
sources: [{{name: s, type: samples, path: "{path}"}}]
notifiers: {{console: {{type: log}}}}
route: {{receivers: [console], group_wait: 0s, group_interval: 1s}}
rules:
  - {{name: cold, metric: util, condition: "< 40", for: 10m}}
  - {{name: nan, metric: loss, condition: nonfinite}}
  - {{name: rising, metric: ppl, condition: increasing, consecutive: 3}}
{extra}
"""
UTIL = SeriesKey("util", make_labels({"gpu": "0", "source": "s"}))
LOSS = SeriesKey("loss", make_labels({"run": "a", "source": "s"}))


def write_rules(tmp_path: Path, extra: str = "") -> Path:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(path=tmp_path / "samples.jsonl", extra=extra))
    return rules


def service(tmp_path: Path, clock: FakeClock) -> Service:
    """A service on tmp_path/rules.yaml (written on first use) and tmp_path/state, opened."""
    rules = tmp_path / "rules.yaml"
    if not rules.exists():
        write_rules(tmp_path)
    s = Service([str(rules)], clock=clock, state=tmp_path / "state")
    s.open()
    return s


def alerts(s: Service) -> dict[str, tuple[AlertState, float, float | None]]:
    return {a.rule: (a.state, a.active_at, a.fired_at) for a in s.engine.state.alerts(s.engine.ruleset.rules)}


def test_a_restart_in_the_middle_of_a_for_keeps_its_start(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    first = service(tmp_path, clock)
    first.ingest([Sample(UTIL, 1000.0, None, 10.0)], 1000.0)
    assert alerts(first) == {"cold": (AlertState.PENDING, 1000.0, None)}
    first.close()

    clock.t = 1300.0
    second = service(tmp_path, clock)
    assert alerts(second) == {"cold": (AlertState.PENDING, 1000.0, None)}
    second.ingest([Sample(UTIL, 1300.0, None, 12.0)], 1300.0)
    second.evaluate(1599.0)
    assert alerts(second)["cold"][0] is AlertState.PENDING
    second.evaluate(1600.0)
    assert alerts(second) == {"cold": (AlertState.FIRING, 1000.0, 1600.0)}  # 10 minutes after it began
    second.close()


def test_a_firing_alert_is_not_notified_again_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    first = service(tmp_path, clock)
    first.ingest([Sample(LOSS, 1000.0, 5, math.nan)], 1000.0)
    firing = [r for r in first.outbox.rows() if r.notification.status == "firing"]
    assert len(firing) == 1
    first.close()

    clock.t = 1010.0
    second = service(tmp_path, clock)
    assert alerts(second)["nan"][0] is AlertState.FIRING
    second.evaluate(1010.0)
    second.ingest([Sample(LOSS, 1020.0, 6, 1.0)], 1020.0)
    second.evaluate(1030.0)  # After group_interval the resolution is planned.
    statuses = sorted(r.notification.status for r in second.outbox.rows())
    assert statuses == ["firing", "resolved"]
    second.close()


def test_a_rising_streak_goes_on_across_a_restart(tmp_path: Path) -> None:
    ppl = SeriesKey("ppl", make_labels({"run": "a", "source": "s"}))
    clock = FakeClock(1000.0)
    first = service(tmp_path, clock)
    first.ingest([Sample(ppl, 1000.0 + i, i, v) for i, v in enumerate([20.0, 21.0, 22.0])], 1002.0)  # two rises
    assert "rising" not in alerts(first)
    first.close()
    second = service(tmp_path, clock)
    second.ingest([Sample(ppl, 1010.0, 3, 23.0)], 1010.0)  # the third rise, after the restart
    assert alerts(second)["rising"][0] is AlertState.FIRING
    second.close()


def test_reload_keeps_unchanged_rules_and_refuses_a_bad_file(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    s = service(tmp_path, clock)
    s.ingest([Sample(UTIL, 1000.0, None, 10.0), Sample(LOSS, 1000.0, 1, math.nan)], 1000.0)
    before = alerts(s)

    write_rules(tmp_path, extra="  - {name: new, metric: loss, condition: '> 100'}\n")
    assert asyncio.run(s.reload()) == []
    assert {r.name for r in s.engine.ruleset.rules} == {"cold", "nan", "rising", "new"}
    assert alerts(s) == before  # Unchanged rules keep their states.

    (tmp_path / "rules.yaml").write_text("rules:\n  - {name: broken, metric: x, condition: sometimes}\n")
    errors = asyncio.run(s.reload())
    assert len(errors) == 1 and "rules[0].condition: unknown condition 'sometimes'" in errors[0]
    assert {r.name for r in s.engine.ruleset.rules} == {"cold", "nan", "rising", "new"}  # The old rules still run.
    s.close()


def test_a_changed_rule_starts_again_from_now(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    s = service(tmp_path, clock)
    s.ingest([Sample(UTIL, 1000.0, None, 10.0)], 1000.0)
    (tmp_path / "rules.yaml").write_text(
        (tmp_path / "rules.yaml").read_text().replace('condition: "< 40", for: 10m', 'condition: "< 20", for: 10m')
    )
    assert asyncio.run(s.reload()) == []
    assert "cold" not in alerts(s)  # Its old state is gone, and the buffered past is not evaluated again.
    s.ingest([Sample(UTIL, 1100.0, None, 10.0)], 1100.0)
    assert alerts(s)["cold"] == (AlertState.PENDING, 1100.0, None)
    s.close()
