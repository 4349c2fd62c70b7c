"""Many Alertmanager peers: every post goes to every peer (as Prometheus' `sendAll`), and two real alertd nodes
with the same NaN, both posting to a real two-peer Alertmanager cluster, make exactly one notification.

The cluster test runs the files of deploy/multinode/ as they are: the alertd rules, alertmanager.yml and the
peers' flags (prometheus-alertmanager.default); only the example addresses (am1.example:9093, ...) and the
receiver's secret file are replaced by this machine's ports and files."""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from am_testkit import Alertmanager, Recorder, alertmanager_process, recording_server
from service_helpers import Alertd, wait_for

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.alertmanager import AlertmanagerNotifier
from alertd.notify.config import AlertmanagerConfig
from alertd.testing.receiver import free_port
from alertd.testing.tbwriter import scalar_record

MULTINODE = Path(__file__).resolve().parents[2] / "deploy" / "multinode"
TOKEN = "tok-3f9a7c1e"


def _notification(rule: str = "loss_not_finite") -> Notification:
    now = time.time()
    t = Transition(
        rule, TransitionKind.FIRING, now, 3, float("nan"), make_labels({"run": "exp1"}), "critical", (), now - 1
    )
    return Notification("am", "g", (), "firing", (t,), f"k-{rule}", now)


def _notifier(*urls: str, **kw: Any) -> AlertmanagerNotifier:
    data = {"type": "alertmanager", "urls": list(urls), "timeout": "2s", **kw}
    return AlertmanagerNotifier("am", AlertmanagerConfig.model_validate(data))


@pytest.mark.anyio
async def test_every_post_and_every_resend_go_to_every_peer_with_the_token() -> None:
    with recording_server() as one, recording_server() as two:
        notifier = _notifier(one.url, two.url, bearer_token=TOKEN)
        await notifier.send(_notification())
        assert await notifier.resend(time.time()) == 1
        await notifier.aclose()
        for peer in (one, two):
            assert [path for path, _ in peer.requests] == ["/api/v2/alerts"] * 2
            assert [h["authorization"] for h in peer.headers_seen] == [f"Bearer {TOKEN}"] * 2
            assert peer.requests[0][1][0]["labels"]["alertname"] == "loss_not_finite"


@pytest.mark.anyio
async def test_one_peer_down_is_delivered_and_logged_naming_only_that_peer(caplog: pytest.LogCaptureFixture) -> None:
    down = free_port()
    with recording_server() as up:
        notifier = _notifier(f"http://u:{TOKEN}@127.0.0.1:{down}", up.url)
        await notifier.send(_notification())  # no error: one peer took it
        await notifier.aclose()
        assert len(up.requests) == 1
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage().startswith(f"alertmanager notifier 'am' (http://127.0.0.1:{down}): cannot connect")
    assert record.getMessage().endswith("(1 of 2 peers took the 1 alert(s))")
    assert TOKEN not in caplog.text


@pytest.mark.anyio
async def test_no_peer_taking_the_alerts_is_an_error_naming_each() -> None:
    down = free_port()
    with recording_server() as busy, recording_server() as hostile:
        busy.status, busy.headers = 503, {"Retry-After": "9"}
        hostile.status, hostile.reply = 400, f"bad request from Bearer {TOKEN}\n\x1b[31m"  # echoes the token
        notifier = _notifier(busy.url, f"http://127.0.0.1:{down}", bearer_token=TOKEN)
        with pytest.raises(NotifyError) as err:
            await notifier.send(_notification())
        await notifier.aclose()
        assert err.value.recoverable and err.value.retry_after == 9.0  # a retry can help at one of them
        message = str(err.value)
        assert message.startswith(f"alertmanager notifier 'am': no peer took the alerts: alertmanager notifier 'am' "
                                  f"({busy.url}) answered 503: ; alertmanager notifier 'am' (http://127.0.0.1:{down}): "
                                  "cannot connect (")  # fmt: skip

        notifier = _notifier(hostile.url, bearer_token=TOKEN)
        with pytest.raises(NotifyError) as err:
            await notifier.send(_notification())
        await notifier.aclose()
        assert not err.value.recoverable
        cleaned = "bad request from Bearer …  [31m"  # the token and the control characters are gone
        assert str(err.value) == f"alertmanager notifier 'am' ({hostile.url}) answered 400: {cleaned}"


@contextlib.contextmanager
def _hostile_peer(pause: float, chunk: int) -> Iterator[str]:
    """A peer that answers 500 with a body of 1 GB it never ends: `chunk` bytes at a time, `pause` apart."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 1000000000\r\n\r\n")
            try:
                while not stop.wait(pause):
                    conn.sendall(b"A" * chunk)
            except OSError:
                pass  # the notifier hung up

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        t.join(5)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("pause", "chunk", "said"),
    [(0.0, 65536, " answered 500: " + "A" * 500), (0.2, 16, ": timed out (TimeoutError)")],  # flood, trickle
)
async def test_a_peer_answering_without_end_is_cut_off(pause: float, chunk: int, said: str) -> None:
    with _hostile_peer(pause, chunk) as url:
        notifier = _notifier(url, timeout="1s")
        started = time.monotonic()
        with pytest.raises(NotifyError) as err:
            await notifier.send(_notification())
        await notifier.aclose()
    assert time.monotonic() - started < 3
    assert str(err.value) == f"alertmanager notifier 'am' ({url}){said}"  # the first 4 KiB read, 500 shown
    assert err.value.recoverable


# -- two alertd nodes, two Alertmanager peers, the files of deploy/multinode/ ----------------------------------


def _substitute(text: str, addresses: dict[str, str]) -> str:
    for example, real in addresses.items():
        text = text.replace(example, real)
    left = [ln for ln in text.splitlines() if ".example" in ln and not ln.lstrip().startswith("#")]
    assert not left, f"an address the test does not replace is left: {left}"
    return text


def _peer_args() -> list[str]:
    """The peers' flags: the ARGS of prometheus-alertmanager.default, as Debian's unit passes them."""
    (args,) = re.findall(r'^ARGS="(.*)"$', (MULTINODE / "prometheus-alertmanager.default").read_text(), re.M)
    return shlex.split(args)


def _status(am: Alertmanager) -> dict[str, Any]:
    cluster: dict[str, Any] = am.get("/api/v2/status").json()["cluster"]
    return cluster


def _received_firing(am: Alertmanager) -> float:
    text = am.get("/metrics").text
    (value,) = re.findall(r'^alertmanager_alerts_received_total\{status="firing",version="v2"\} (\S+)$', text, re.M)
    return float(value)


def _nan_event_file(run: Path) -> None:
    """A run's event file with a NaN loss, written and closed: no process holds it, so no writer is verified
    and the kill notifier of the rules refuses (and says so through Alertmanager)."""
    run.mkdir(parents=True)
    now = time.time()
    records = [scalar_record("train/loss", 2.0 - step / 100, step, now - 1) for step in range(0, 30, 10)]
    records.append(scalar_record("train/loss", float("nan"), 30, now))
    (run / f"events.out.tfevents.{int(now)}.gpu1.4242.0").write_bytes(b"".join(records))


def test_two_nodes_post_the_same_nan_to_two_peers_and_one_notification_goes_out(tmp_path: Path) -> None:
    web, gossip = [free_port(), free_port()], [free_port(), free_port()]
    addresses = {
        **{f"am{i + 1}.example:9093": f"127.0.0.1:{web[i]}" for i in range(2)},
        **{f"am{i + 1}.example:9094": f"127.0.0.1:{gossip[i]}" for i in range(2)},
        "/etc/prometheus/slack-url": str(tmp_path / "slack-url"),
    }
    args = _peer_args()
    timeouts = [float(a.split("=")[1].rstrip("s")) for a in args if a.startswith("--cluster.peer-timeout=")]
    peer_timeout = timeouts[-1] if timeouts else 15.0  # Alertmanager's default
    with recording_server() as chat:
        (tmp_path / "slack-url").write_text(f"{chat.url}/slack\n")
        config = tmp_path / "alertmanager.yml"
        config.write_text(_substitute((MULTINODE / "alertmanager.yml").read_text(), addresses))
        with (
            _peer(tmp_path, 0, web, gossip, args, config, addresses, chat) as am1,
            _peer(tmp_path, 1, web, gossip, args, config, addresses, chat) as am2,
        ):
            wait_for(
                lambda: all(len(_status(am)["peers"]) == 2 and _status(am)["status"] == "ready" for am in (am1, am2)),
                "the two Alertmanager peers to form one settled cluster",
                20,
            )
            rules = tmp_path / "rules.yaml"
            rules.write_text(_substitute((MULTINODE / "rules.yaml").read_text(), addresses))
            logdir = tmp_path / "runs"
            logdir.mkdir()
            nodes = [_node(tmp_path, i, rules, logdir) for i in range(2)]
            try:
                for node, port in nodes:
                    wait_for(lambda p=port: _ready(p), "alertd to be ready", 30, node)
                _nan_event_file(logdir / "exp1")
                (first,) = wait_for(lambda: chat.requests, "the notification", 30, nodes[0][0])
                sent = time.monotonic()
                for node, port in nodes:  # each node delivered it (to at least one peer, so says alertd)
                    wait_for(lambda p=port: _delivered(p) >= 1, "alertd to count the delivery", 10, node)
                # The second peer sends peer_timeout after the first, unless the gossiped log says it was sent.
                time.sleep(max(0.0, sent + peer_timeout + 3 - time.monotonic()))
                assert len(chat.requests) == 1, chat.requests
            finally:
                for node, _ in nodes:
                    node.stop()
            path, body = first
            assert path == "/slack"
            (attachment,) = body["attachments"]
            assert attachment["title"] == "[FIRING] loss_not_finite in exp1"
            assert "train/loss is NaN at step 30 in exp1" in attachment["text"]
            for am in (am1, am2):  # both peers hold the alert and the kill's report, and got them from both nodes
                held = am.alerts()
                assert {a["labels"]["alertname"] for a in held} == {"loss_not_finite"}
                assert sorted(str(a["labels"].get("action")) for a in held) == ["None", "kill"]
                assert _received_firing(am) >= 2 * len(held)


@contextlib.contextmanager
def _peer(
    tmp_path: Path,
    i: int,
    web: list[int],
    gossip: list[int],
    args: list[str],
    config: Path,
    addresses: dict[str, str],
    chat: Recorder,
) -> Iterator[Alertmanager]:
    """Peer `i` with the deployed flags, its listen addresses on 127.0.0.1, and what Debian's unit sets."""
    own = [a.replace("0.0.0.0:9094", f"127.0.0.1:{gossip[i]}") for a in args]
    argv = [_substitute(a, addresses) for a in own] + [
        f"--config.file={config}",
        f"--storage.path={tmp_path / f'am{i + 1}'}",
        f"--web.listen-address=127.0.0.1:{web[i]}",
        "--cluster.settle-timeout=2s",  # the test's only change: settle in 2 s, not the 1 minute default
        "--log.level=warn",
    ]
    assert f"--cluster.listen-address=127.0.0.1:{gossip[i]}" in argv
    am = Alertmanager(f"http://127.0.0.1:{web[i]}", chat)
    with alertmanager_process(argv, tmp_path / f"am{i + 1}.log", am):
        yield am


def _node(tmp_path: Path, i: int, rules: Path, logdir: Path) -> tuple[Alertd, int]:
    port = free_port()
    state = tmp_path / f"node{i + 1}" / "state"
    state.parent.mkdir()
    return Alertd(rules, state, "--listen", f"127.0.0.1:{port}", env={"ALERTD_LOGDIR": str(logdir)}), port


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _delivered(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.findall(r'^alertd_notifications_total\{outcome="delivered",receiver="am"\} (\S+)$', text, re.M)
    return float(found[0]) if found else 0.0
