"""What an action notifier did (kill, wandb_stop) reaches the alert's other receivers, never the action receivers."""

from __future__ import annotations

from dataclasses import dataclass

from alertd.actions.kill import KillReport, SentSignal
from alertd.actions.wandb_stop import WandbStopReport
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
    action: str = "kill"

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


def test_kill_reports_keep_their_group_and_keys() -> None:
    sent = KillReport("stop", "abc", "loss_not_finite", "writer", 42, "h", signals=(SentSignal("SIGINT", 10.0),))
    dry = KillReport("stop", "abc", "loss_not_finite", "writer", 42, "h", dry_run=True)
    refused = KillReport("stop", "abc", "loss_not_finite", "writer", None, "h", refused="no writer")
    keys = [announcements(r, ALERT, ROUTE, ["stop"], 11.0)[0].key for r in (sent, dry, refused)]
    assert keys == [
        "kill:abc:stop:SIGINT10.000:chat",
        "kill:abc:stop:dry:chat",
        "kill:abc:stop:refused:chat",
    ]
    (note,) = announcements(sent, ALERT, ROUTE, ["stop"], 11.0)
    assert note.group_key == "kill:abc" and dict(note.alerts[0].labels)["action"] == "kill"


def test_a_wandb_stop_report_is_announced_as_its_own_action_once_per_firing() -> None:
    stopped = WandbStopReport("stop", "abc", "loss_not_finite", "me/proj/r1", True, "running", stamp="5.000")
    (note,) = announcements(stopped, ALERT, ROUTE, skip=["stop"], now=11.0)
    (t,) = note.alerts
    assert dict(t.labels) == {"run": "exp1", "metric": "loss", "action": "wandb_stop", "notifier": "stop"}
    assert dict(t.annotations)["summary"] == (
        "wandb_stop stop for loss_not_finite: asked W&B to stop run me/proj/r1 (state was running)"
    )
    assert note.group_key == "wandb_stop:abc" and note.key == "wandb_stop:abc:stop:5.000:chat"
    later = WandbStopReport("stop", "abc", "loss_not_finite", "me/proj/r1", True, "running", stamp="90.000")
    refused = WandbStopReport("stop", "abc", "loss_not_finite", "", refused="no run label", stamp="5.000")
    refused_later = WandbStopReport("stop", "abc", "loss_not_finite", "", refused="no run label", stamp="90.000")
    keys = {announcements(r, ALERT, ROUTE, ["stop"], 95.0)[0].key for r in (stopped, later, refused, refused_later)}
    assert len(keys) == 4  # another firing of the same alert is announced again, refused or not
