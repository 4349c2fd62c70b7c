"""The prometheus source against Debian's real `prometheus` (2.42) scraping a static dcgm-exporter-like
exporter every second: plain HTTP, then TLS and basic auth (`--web.config.file`); and one rule through the
real service (alertd as a subprocess) firing on it."""

from __future__ import annotations

import json
import math
import signal
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prom_testkit import Prometheus, exporter, make_ca, make_server_cert, start_prometheus
from service_helpers import Alertd, wait_for

from alertd.errors import SourceError
from alertd.sources.config import PrometheusConfig
from alertd.sources.prometheus import PrometheusSource
from alertd.testing.receiver import Receiver

UUID0, UUID1 = "GPU-5d2e8f1a-0c3b-4e7d-9a61-1f0b2c3d4e5f", "GPU-8a7b6c5d-4e3f-2a1b-0c9d-8e7f6a5b4c3d"
DCGM = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID0}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}} 12
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="{UUID1}",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}} 97
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="0",UUID="{UUID0}",device="nvidia0",Hostname="node-1"}} NaN
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="1",UUID="{UUID1}",device="nvidia1",Hostname="node-1"}} +Inf
"""
USER, PASSWORD = "alertd", "Pr0m-web-Pa55word"
SERVER_NAME = "prometheus.test"


@dataclass
class Servers:
    """Two Prometheus servers scraping one exporter: `plain`, and `secure` (TLS, client certificates required,
    basic auth)."""

    plain: Prometheus
    secure: Prometheus
    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    d = tmp_path_factory.mktemp("prom")
    ca, other = make_ca(d, "alertd-test-ca"), make_ca(d, "someone-else")
    cert, key = make_server_cert(ca, d, [SERVER_NAME], [])  # valid for prometheus.test only, not 127.0.0.1
    client_cert, client_key = make_server_cert(ca, d, ["alertd"], [], client=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = (
        f"tls_server_config: {{cert_file: {cert}, key_file: {key}, client_ca_file: {ca.cert},\n"
        "  client_auth_type: RequireAndVerifyClientCert}\n"
        f"basic_auth_users: {{{USER}: '{hashed}'}}\n"
    )
    with exporter(DCGM) as target:
        plain = start_prometheus(d / "plain", target)
        secure = start_prometheus(d / "secure", target, web)
        ctx = ssl.create_default_context(cafile=str(ca.cert))
        ctx.check_hostname = False  # the test's own readiness checks; the source is what checks names
        ctx.load_cert_chain(client_cert, client_key)
        secure.verify, secure.auth = ctx, (USER, PASSWORD)
        try:
            for p in (plain, secure):
                p.wait_scraped("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
            yield Servers(plain, secure, ca.cert, other.cert, client_cert, client_key)
        finally:
            plain.stop()
            secure.stop()


def config(url: str, **kw: Any) -> PrometheusConfig:
    queries = [
        {"query": "DCGM_FI_DEV_GPU_UTIL", "metric": "gpu.utilization", "labels": {"run": "llama-70b"}},
        {"query": "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "metric": "gpu.utilization.avg"},
        {"query": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"},
    ]
    return PrometheusConfig.model_validate(
        {"type": "prometheus", "name": "dcgm", "url": url, "queries": queries, "timeout": "5s", **kw}
    )


async def poll(cfg: PrometheusConfig) -> dict[str, tuple[float, float]]:
    src = PrometheusSource(cfg)
    try:
        now = time.time()
        out = await src.poll(now)
    finally:
        await src.aclose()
    assert all(s.step is None and abs(s.time - now) < 0.01 for s in out)
    return {str(s.series): (s.value, s.time) for s in out}


def expected(instance: str) -> dict[str, float]:
    """What the three queries give: labels as Prometheus holds them (the exporter's, `instance`, `job`),
    without `__name__`, with `source` and the query's `run`."""

    def key(metric: str, gpu: int, **extra: str) -> str:
        labels = {"Hostname": "node-1", "UUID": (UUID0, UUID1)[gpu], "device": f"nvidia{gpu}", "gpu": str(gpu)}
        labels.update(instance=instance, job="dcgm", source="dcgm", **extra)
        return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    h100 = {"modelName": "NVIDIA H100 80GB HBM3", "run": "llama-70b"}
    return {
        key("gpu.utilization", 0, **h100): 12.0,
        key("gpu.utilization", 1, **h100): 97.0,
        'gpu.utilization.avg{Hostname="node-1",source="dcgm"}': 54.5,
        key("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0): math.nan,
        key("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1): math.inf,
    }


def same(got: dict[str, tuple[float, float]], want: dict[str, float]) -> None:
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key][0] == value or (math.isnan(value) and math.isnan(got[key][0])), key


@pytest.mark.anyio
async def test_dcgm_series_from_a_real_prometheus(servers: Servers, caplog: pytest.LogCaptureFixture) -> None:
    instance = servers.plain.query("up")[0]["metric"]["instance"]
    same(await poll(config(servers.plain.url)), expected(instance))

    # Prometheus' own error for a bad query, with the query named; the other queries' samples are kept.
    cfg = config(servers.plain.url)
    bad = PrometheusConfig.model_validate(
        {**cfg.model_dump(), "queries": [*cfg.model_dump()["queries"], {"query": "rate(x"}]}
    )
    got = await poll(bad)
    assert len(got) == 5
    (message,) = [r.getMessage() for r in caplog.records if "queries[3]" in r.getMessage()]
    assert message.startswith(
        f"prometheus source dcgm: queries[3] ('rate(x') at {servers.plain.url[7:]}: HTTP 400: bad_data:"
    )
    assert "parse error" in message


@pytest.mark.anyio
async def test_tls_and_basic_auth(servers: Servers, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    url = servers.secure.url
    mine = {"cert_file": str(servers.client_cert), "key_file": str(servers.client_key)}
    tls = {"ca_file": str(servers.ca), "server_name": SERVER_NAME, **mine}
    auth = {"username": USER, "password_file": str(tmp_path / "pw")}
    instance = servers.secure.query("up")[0]["metric"]["instance"]
    same(await poll(config(url, tls=tls, basic_auth=auth)), expected(instance))

    host = url.removeprefix("https://")
    failures = {
        "wrong password": (dict(tls=tls, basic_auth={"username": USER, "password": PASSWORD + "-wrong"}),
                           f"Prometheus at {host} refused the credentials (HTTP 401): check basic_auth (user alertd)"),
        "no credentials": (dict(tls=tls), "(HTTP 401): no credentials are set (basic_auth or bearer_token)"),
        "wrong CA": (dict(tls={**tls, "ca_file": str(servers.other_ca)}, basic_auth=auth),
                     f"TLS with {host} failed: certificate verify failed: unable to get local issuer certificate"),
        "system CAs": (dict(tls={"server_name": SERVER_NAME, **mine}, basic_auth=auth),
                       f"TLS with {host} failed: certificate verify failed"),
        "name not in the certificate": (dict(tls={"ca_file": str(servers.ca), **mine}, basic_auth=auth),
                                        f"TLS with {host} failed: certificate verify failed: IP address mismatch"),
    }  # fmt: skip
    for why, (kw, message) in failures.items():
        with pytest.raises(SourceError) as failed:
            await poll(config(url, **kw))
        assert message in str(failed.value), why
        assert PASSWORD not in str(failed.value)
    # insecure_skip_verify: no CA, no name check (as Prometheus' own `tls_config` has it).
    same(await poll(config(url, tls={"insecure_skip_verify": True, **mine}, basic_auth=auth)), expected(instance))
    # No client certificate: the server ends the connection (TLS 1.3: its alert may come after the handshake, as
    # an error or as a closed connection, whichever the client reads first).
    with pytest.raises(SourceError) as failed:
        await poll(
            config(url, tls={"ca_file": str(servers.ca), "server_name": SERVER_NAME}, basic_auth=auth, max_retries=0)
        )
    told = str(failed.value)
    assert (
        f"TLS with {host} failed: sslv3 alert bad certificate (does the server want a client certificate?" in told
        or (f"Prometheus at {host}: connection failed (ReadError), giving up after 1 tries" in told)
    ), told


RULES = """
sources:
  - name: dcgm
    type: prometheus
    url: "{url}"
    interval: 0.5s
    queries:
      - {{query: DCGM_FI_DEV_GPU_UTIL, metric: gpu.utilization}}
notifiers:
  hook: {{type: webhook, format: generic, url: "{hook}", timeout: 5s}}
route: {{receivers: [hook], group_by: [rule, gpu], group_wait: 0s, group_interval: 1s}}
rules:
  - name: gpu_idle
    metric: gpu.utilization
    condition: "< 40"
    severity: warning
    annotations: {{summary: "GPU {{{{ labels.gpu }}}} on {{{{ labels.Hostname }}}} is at {{{{ value }}}} %"}}
"""


def test_a_rule_fires_on_prometheus_samples_through_the_service(servers: Servers, tmp_path: Path) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(url=servers.plain.url, hook=receiver.url))
    alertd = Alertd(rules, tmp_path / "state")
    try:

        def firing() -> list[dict[str, Any]]:
            with receiver.recorder.lock:
                return [b for b in receiver.recorder.bodies if b["status"] == "firing"]  # type: ignore[misc]

        (body,) = wait_for(firing, "gpu_idle to fire", 30, alertd)
        (alert,) = body["alerts"]
        assert alert["labels"]["alertname"] == "gpu_idle" and alert["labels"]["gpu"] == "0"
        assert alert["labels"]["UUID"] == UUID0 and alert["labels"]["source"] == "dcgm"
        assert alert["annotations"]["summary"] == "GPU 0 on node-1 is at 12 %"
        time.sleep(1.5)  # more polls: GPU 1 (97 %) never fires, GPU 0 not twice
        assert len(firing()) == 1, json.dumps(firing())
        assert alertd.stop(signal.SIGTERM) == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
