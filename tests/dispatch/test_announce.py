"""What the kill notifier did reaches the alert's other receivers, never the action receivers."""

from __future__ import annotations

from dataclasses import dataclass

from alertd.dispatch.announce import announcements
from alertd.model import Alert, AlertState, make_labels

from .helpers import route


@dataclass
class Sent:
    name: str
    time: float


@dataclass
class Report:
    notifier: str = "stop"
    fingerprint: str = "abc"
    rule: str = "loss_not_finite"
    refused: str | None = None
    signals: tuple[Sent, ...] = (Sent("SIGINT", 10.0),)

    def summary(self) -> str:
        return "kill stop for loss_not_finite: sent SIGINT to pid 42; exited with status 0"


ALERT = Alert("loss_not_finite", AlertState.FIRING, make_labels({"run": "exp1", "metric": "loss"}), "critical",
              float("nan"), 7, 5.0, 5.0, 5.0)  # fmt: skip
ROUTE = route(
    {"receivers": ["console"], "routes": [{"match": {"severity": "critical"}, "receivers": ["chat", "stop"]}]}
)


def test_the_report_goes_to_the_other_receivers_of_the_alerts_route() -> None:
    notes = announcements(Report(), ALERT, ROUTE, skip=["stop"], now=11.0)
    assert [n.receiver for n in notes] == ["chat"]
    (t,) = notes[0].alerts
    assert dict(t.labels) == {"run": "exp1", "metric": "loss", "action": "kill", "notifier": "stop"}
    assert dict(t.annotations)["summary"].startswith("kill stop for loss_not_finite: sent SIGINT")


def test_each_distinct_report_has_its_own_key() -> None:
    first = announcements(Report(), ALERT, ROUTE, skip=["stop"], now=11.0)
    again = announcements(Report(), ALERT, ROUTE, skip=["stop"], now=12.0)
    escalated = announcements(Report(signals=(Sent("SIGINT", 10.0), Sent("SIGTERM", 70.0))), ALERT, ROUTE, ["stop"], 71)
    assert first[0].key == again[0].key != escalated[0].key
