"""The apprise notifier through the real service, dispatcher and outbox: a `json://` target on 127.0.0.1
that answers 500 first gets the notification again, from the outbox, after the retry's backoff, and once."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from alertd.clock import FakeClock
from alertd.model import Sample, SeriesKey, make_labels
from alertd.notify.apprise_notifier import AppriseNotifier
from alertd.service import Service
from alertd.testing.receiver import Receiver

T0 = 1_780_000_000.0
TOKEN = "tok3nS3cr3tOUTBOX"
LOSS = SeriesKey("loss", make_labels({"run": "exp1", "source": "s"}))
RULES = """
sources: [{{name: s, type: samples, path: "{samples}"}}]
notifiers:
  chat: {{type: apprise, urls: ["json://127.0.0.1:{port}/hook/{token}"], timeout: 10s}}
route: {{receivers: [chat], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: loss, condition: nonfinite, severity: critical}}
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def service(tmp_path: Path, clock: FakeClock) -> Service:
    s = Service([str(tmp_path / "rules.yaml")], clock=clock, state=tmp_path / "state")
    s.open()
    assert isinstance(s.notifiers["chat"], AppriseNotifier)
    return s


async def close(s: Service) -> None:
    for n in s.notifiers.values():
        await n.aclose()
    s.close()


@pytest.mark.anyio
async def test_a_500_is_retried_from_the_outbox_and_delivered_once(tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "rules.yaml").write_text(RULES.format(samples=tmp_path / "s.jsonl", port=receiver.port, token=TOKEN))
    receiver.recorder.responses = [(500, {})]
    clock = FakeClock(T0)
    s = service(tmp_path, clock)
    s.ingest([Sample(LOSS, T0, 250, math.nan)], T0)
    assert s.dispatcher is not None
    (out,) = await s.dispatcher.deliver_due(T0)
    assert out.receiver == "chat" and out.result == "retry" and out.next_attempt_at is not None
    assert out.error is not None and "Apprise does not say why" in out.error and TOKEN not in out.error
    assert [status for _, status in receiver.recorder.received] == [500]
    (row,) = s.outbox.rows()
    assert (row.status, row.attempts) == ("pending", 1)
    retry_at = out.next_attempt_at
    await close(s)  # the retry is the outbox's: it survives a restart

    clock.t = retry_at
    s = service(tmp_path, clock)
    assert s.dispatcher is not None
    (out,) = await s.dispatcher.deliver_due(retry_at)
    assert out.result == "delivered"
    assert await s.dispatcher.deliver_due(retry_at + 3600) == []  # delivered once: nothing left to send
    (row,) = s.outbox.rows()
    assert (row.status, row.attempts) == ("delivered", 2)
    await close(s)

    assert [status for _, status in receiver.recorder.received] == [500, 200]
    (body,) = receiver.recorder.bodies
    assert body["type"] == "failure"
    assert body["title"] == "[FIRING:1] loss_not_finite (run=exp1)"
    assert str(body["message"]).startswith("FIRING loss_not_finite: loss = NaN at step 250 in run exp1")
