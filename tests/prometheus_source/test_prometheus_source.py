"""The prometheus source against a real HTTP server on 127.0.0.1 that answers as Prometheus' API does (and as
a broken or hostile one would)."""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prom_testkit import Reply, Seen, scripted

from alertd.config import load_config
from alertd.errors import ConfigError, SourceError
from alertd.model import Sample
from alertd.sources.config import PrometheusConfig
from alertd.sources.prometheus import PrometheusSource
from alertd.sources.registry import build_source

pytestmark = pytest.mark.anyio
T = 1_717_000_000.5
PASSWORD = "pr0m-Secret-pa55"
TOKEN = "tok-3f9a2c8e1d7b"
UTIL = "DCGM_FI_DEV_GPU_UTIL"


def config(url: str, queries: list[dict[str, Any]], **kw: Any) -> PrometheusConfig:
    return PrometheusConfig.model_validate({"type": "prometheus", "name": "prom", "url": url, "queries": queries, **kw})


def vector(*series: tuple[dict[str, str], Any], t: float = T) -> bytes:
    result = [{"metric": labels, "value": [t, value]} for labels, value in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def answer(kind: str, result: Any) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()


def error(kind: str, text: str) -> bytes:
    return json.dumps({"status": "error", "errorType": kind, "error": text}).encode()


def by_query(table: dict[str, Reply]) -> Any:
    """An answer function: the reply scripted for the request's query."""

    def answer(seen: Seen) -> Reply:
        return table[seen.params["query"]]

    return answer


def gpu(i: int, **extra: str) -> dict[str, str]:
    return {"__name__": UTIL, "gpu": str(i), "UUID": f"GPU-{i:08x}", "Hostname": "node-1", **extra}


def values(samples: list[Sample] | Any) -> dict[str, float]:
    return {str(s.series): s.value for s in samples}


async def test_a_vector_becomes_one_sample_per_series_with_its_labels() -> None:
    table = {
        UTIL: Reply(body=vector((gpu(0, source="dcgm"), "12"), (gpu(1), "97.5"))),
        "avg by (job) (rate(x[5m]))": Reply(body=vector(({"job": "train"}, "0.25"))),
    }
    with scripted(by_query(table)) as server:
        src = PrometheusSource(
            config(
                server.url,
                [
                    {"query": UTIL, "metric": "gpu.utilization", "labels": {"run": "llama-70b"}},
                    {"query": "avg by (job) (rate(x[5m]))", "metric": "x.rate"},
                ],
            )
        )
        out = await src.poll(T + 0.25)
        await src.aclose()
    assert [s.series.metric for s in out] == ["gpu.utilization", "gpu.utilization", "x.rate"]
    first = out[0]
    assert first.series.label_dict() == {
        "gpu": "0",
        "UUID": "GPU-00000000",
        "Hostname": "node-1",
        "run": "llama-70b",
        "source": "prom",
        "exported_source": "dcgm",  # the series' own `source`, kept as Prometheus keeps clashing labels
    }
    assert (first.time, first.step, first.value) == (T, None, 12.0)
    assert out[1].value == 97.5
    assert out[2].series.label_dict() == {"job": "train", "source": "prom"}
    # As Prometheus' own clients ask: POST, a form with the query, the time and the timeout.
    posted = sorted(server.seen, key=lambda s: s.params["query"])
    assert all(s.method == "POST" and s.path == "/api/v1/query" for s in posted)
    assert posted[0].params == {"query": UTIL, "time": f"{T + 0.25:.3f}", "timeout": "9.000"}
    assert posted[0].headers["Content-Type"] == "application/x-www-form-urlencoded"


async def test_the_name_of_the_series_is_the_metric_unless_the_query_names_one() -> None:
    body = vector(({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0"}, "61"), ({"__name__": "up", "job": "x"}, "1"))
    with scripted(lambda seen: Reply(body=body)) as server:
        src = PrometheusSource(config(server.url, [{"query": '{__name__=~"DCGM_FI_DEV_GPU_TEMP|up"}'}]))
        assert values(await src.poll(T)) == {
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",source="prom"}': 61.0,
            'up{job="x",source="prom"}': 1.0,
        }
        await src.aclose()


async def test_nan_and_infinities_in_prometheus_spelling() -> None:
    body = vector(*(({"__name__": "v", "i": str(i)}, text) for i, text in enumerate(["NaN", "+Inf", "-Inf", "1e+06"])))
    with scripted(lambda seen: Reply(body=body)) as server:
        src = PrometheusSource(config(server.url, [{"query": "v"}]))
        got = [s.value for s in sorted(await src.poll(T), key=lambda s: s.series.label("i") or "")]
        await src.aclose()
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf, 1e6]


async def test_a_scalar_needs_a_metric_and_other_result_types_are_errors_naming_the_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = {
        "scalar(up)": Reply(body=answer("scalar", [T, "3"])),
        "time()": Reply(body=answer("scalar", [T, "4"])),
        "up[5m]": Reply(body=answer("matrix", [{"metric": {"__name__": "up"}, "values": [[T, "1"]]}])),
        '"text"': Reply(body=answer("string", [T, "text"])),
        "sum(up)": Reply(body=vector(({}, "2"))),
    }
    with scripted(by_query(table)) as server:
        queries = [{"query": "scalar(up)", "metric": "targets.up"}, {"query": "time()"}, {"query": "up[5m]"}]
        queries += [{"query": '"text"', "metric": "t"}, {"query": "sum(up)"}]
        src = PrometheusSource(config(server.url, queries))
        with caplog.at_level(logging.ERROR):
            out = await src.poll(T)
        await src.aclose()
    assert values(out) == {'targets.up{source="prom"}': 3.0}
    host = f"127.0.0.1:{server.port}"
    errors = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    assert errors == {
        f"prometheus source prom: queries[1] ('time()') at {host}: a scalar has no name: give the query a metric",
        f"prometheus source prom: queries[2] ('up[5m]') at {host}: a matrix result; only instant vectors and "
        "scalars are read (a range selector such as x[5m] needs a function around it: rate, avg_over_time)",
        f"prometheus source prom: queries[3] ('\"text\"') at {host}: a string result; only instant vectors and "
        "scalars are read",
        f"prometheus source prom: queries[4] ('sum(up)') at {host}: a series has no __name__ (a function or an "
        "aggregation drops it): give the query a metric",
    }


async def test_prometheus_error_answers_are_surfaced_with_the_query(caplog: pytest.LogCaptureFixture) -> None:
    bad = "1:5: parse error: unexpected right parenthesis ')'"
    table = {
        "rate(x))": Reply(400, error("bad_data", bad)),
        "a * on() b": Reply(422, error("execution", "many-to-many matching not allowed")),
        "heavy": Reply(503, error("timeout", "query timed out in expression evaluation"), {"Retry-After": "0"}),
    }
    with scripted(by_query(table)) as server:
        src = PrometheusSource(config(server.url, [{"query": q} for q in table], max_retries=1))
        with pytest.raises(SourceError) as failed:
            await src.poll(T)
        await src.aclose()
    host = f"127.0.0.1:{server.port}"
    # Every query failed: the poll fails, naming the first (and how many more), recoverable (422 and 503 may pass).
    assert str(failed.value) == (
        f"prometheus source prom: queries[0] ('rate(x))') at {host}: HTTP 400: bad_data: {bad} "
        "(and 2 more of its queries failed)"
    )
    assert failed.value.recoverable
    assert [s.params["query"] for s in server.seen].count("heavy") == 2  # 503 retried once (Retry-After: 0)
    assert [s.params["query"] for s in server.seen].count("rate(x))") == 1  # 400 and 422 are not retried

    with scripted(by_query(table)) as server, caplog.at_level(logging.ERROR):
        src = PrometheusSource(config(server.url, [{"query": "rate(x))"}], max_retries=0))
        with pytest.raises(SourceError) as failed:
            await src.poll(T)
        assert not failed.value.recoverable  # a syntax error stays one
        await src.aclose()
        src = PrometheusSource(config(server.url, [{"query": "heavy"}, {"query": "a * on() b"}], max_retries=0))
        with pytest.raises(SourceError, match=r"HTTP 503: timeout: query timed out in expression evaluation, giving"):
            await src.poll(T)
        await src.aclose()


async def test_one_failing_query_loses_no_other_samples_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    table = {"up": Reply(body=vector(({"__name__": "up"}, "1"))), "bad(": Reply(400, error("bad_data", "parse error"))}
    with scripted(by_query(table)) as server, caplog.at_level(logging.INFO, logger="alertd.sources.prometheus"):
        src = PrometheusSource(config(server.url, [{"query": "up"}, {"query": "bad("}]))
        for _ in range(3):
            assert values(await src.poll(T)) == {'up{source="prom"}': 1.0}
        table["bad("] = Reply(body=vector(({"__name__": "fixed"}, "2")))
        assert len(await src.poll(T)) == 2
        await src.aclose()
    messages = [r.getMessage() for r in caplog.records]
    where = f"prometheus source prom: queries[1] ('bad(') at 127.0.0.1:{server.port}"
    assert messages == [f"{where}: HTTP 400: bad_data: parse error", f"{where}: works again"]


async def test_an_answer_with_too_many_series_or_twice_the_same_series_fails_its_query() -> None:
    table = {
        "many": Reply(body=vector(*(({"__name__": "m", "i": str(i)}, "1") for i in range(3)))),
        '{__name__=~"a|b"}': Reply(
            body=vector(({"__name__": "a", "gpu": "0"}, "1"), ({"__name__": "b", "gpu": "0"}, "2"))
        ),
    }
    with scripted(by_query(table)) as server:
        src = PrometheusSource(config(server.url, [{"query": "many", "max_series": 2}]))
        with pytest.raises(SourceError, match=r"3 series, more than max_series \(2\): narrow the query or raise it"):
            await src.poll(T)
        await src.aclose()
        src = PrometheusSource(config(server.url, [{"query": "many", "max_series": 3}]))
        assert len(await src.poll(T)) == 3
        await src.aclose()
        # Beside a query that works, the one over its limit is left out, and the source's health says which.
        src = PrometheusSource(config(server.url, [{"query": "many", "max_series": 2}, {"query": "many"}]))
        assert len(await src.poll(T)) == 3
        where = f"prometheus source prom: queries[0] ('many') at 127.0.0.1:{server.port}"
        assert src.take_cuts() == [f"{where}: 3 series, more than max_series (2): narrow the query or raise it"]
        await src.aclose()
        src = PrometheusSource(config(server.url, [{"query": '{__name__=~"a|b"}', "metric": "ab"}]))
        with pytest.raises(SourceError, match=r'two series are one once __name__ is dropped: ab\{gpu="0"'):
            await src.poll(T)
        await src.aclose()


async def test_malformed_answers_fail_the_query_clearly() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    cases = {
        b"<html>502 Bad Gateway</html>": "the answer is not JSON",
        b'{"status": "success"}': "the answer has no data",
        b"[1, 2]": "the answer is not a JSON object",
        deep: "the answer is nested too deeply",
        answer("vector", [{"metric": {"__name__": "x"}, "value": [T, "1_000"]}]): "a value is not a number: '1_000'",
        answer("vector", [{"metric": {"__name__": "x"}, "value": ["now", "1"]}]): "a timestamp is not a time: 'now'",
        answer(
            "vector", [{"metric": {"__name__": "x", "n": 5}, "value": [T, "1"]}]
        ): "a series' labels are not strings",
        answer("vector", [{"metric": {"__name__": "h"}, "histogram": [T, {"count": "3"}]}]): "a native histogram?",
        answer("vector", {"a": 1}): "the vector's result is not a list",
        answer("heatmap", []): "an unknown result type 'heatmap'",
        json.dumps({"status": "error", "errorType": "internal", "error": "boom"}).encode(): "internal: boom",
    }
    for body, message in cases.items():
        with scripted(lambda seen, body=body: Reply(body=body)) as server:  # type: ignore[misc]
            src = PrometheusSource(config(server.url, [{"query": "x"}]))
            with pytest.raises(SourceError) as failed:
                await src.poll(T)
            await src.aclose()
        assert message in str(failed.value), (message, str(failed.value))


async def test_an_answer_over_max_answer_is_not_read_whole_gzip_included() -> None:
    big = vector(*(({"__name__": "m", "i": str(i)}, "1") for i in range(200)))
    assert len(big) > 4096
    bomb = gzip.compress(b" " * (32 << 20), compresslevel=9)  # 32 MiB of spaces in 32 KiB
    table = {
        "plain": Reply(body=big),
        "chunked": Reply(body=big, headers={"Content-Length": ""}),  # no length said: read until the cap
        "gzip": Reply(body=bomb, headers={"Content-Encoding": "gzip"}),
        "small-gzip": Reply(body=gzip.compress(vector(({"__name__": "z"}, "5"))), headers={"Content-Encoding": "gzip"}),
        "broken-gzip": Reply(body=b"\x1f\x8b\x08\x00garbage", headers={"Content-Encoding": "gzip"}),
        "cut-gzip": Reply(
            body=gzip.compress(vector(({"__name__": "z"}, "5")))[:-9], headers={"Content-Encoding": "gzip"}
        ),
        "br": Reply(body=b"xx", headers={"Content-Encoding": "br"}),
    }
    with scripted(by_query(table)) as server:
        for query, message in [
            ("plain", "the answer is over max_answer (4096 bytes): narrow the query"),
            ("chunked", "the answer is over max_answer (4096 bytes)"),
            ("gzip", "the answer is over max_answer (4096 bytes)"),
            ("broken-gzip", "the answer's gzip is cut short or corrupt"),
            ("cut-gzip", "the answer's gzip is cut short or corrupt"),
            ("br", "the answer's Content-Encoding 'br' was not asked for"),
        ]:
            src = PrometheusSource(config(server.url, [{"query": query}], max_answer=4096))
            started = time.monotonic()
            with pytest.raises(SourceError, match=re.escape(message)):
                await src.poll(T)
            assert time.monotonic() - started < 2
            await src.aclose()
        src = PrometheusSource(config(server.url, [{"query": "small-gzip"}], max_answer=4096))
        assert values(await src.poll(T)) == {'z{source="prom"}': 5.0}
        await src.aclose()
    assert all(s.headers["Accept-Encoding"] == "gzip" for s in server.seen)


async def test_a_hanging_or_trickling_server_costs_one_timeout() -> None:
    body = vector(({"__name__": "up"}, "1"))
    table = {"hang": Reply(body=body, hang=30), "trickle": Reply(body=body, trickle=0.05)}
    with scripted(by_query(table)) as server:
        for query in ("hang", "trickle"):
            src = PrometheusSource(config(server.url, [{"query": query}] * 3, timeout="0.5s", max_retries=3))
            started = time.monotonic()
            with pytest.raises(SourceError, match=r"no answer within 0.5s \(timeout\) \(and 2 more"):
                await src.poll(T)
            assert time.monotonic() - started < 1.5  # the queries wait together, and a timeout is not retried
            await src.aclose()


async def test_basic_auth_and_bearer_token_are_sent_and_never_logged_or_told(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    def answer(seen: Seen) -> Reply:
        got = seen.headers.get("Authorization", "")
        if got in ("Basic YWxlcnRkOnByMG0tU2VjcmV0LXBhNTU=", f"Bearer {TOKEN}"):
            return Reply(body=vector(({"__name__": "up"}, "1")))
        # A hostile server quoting the credentials back, everywhere it can.
        return Reply(401, json.dumps({"status": "error", "errorType": "auth", "error": got}).encode())

    (tmp_path / "password").write_text(PASSWORD + "\n")
    (tmp_path / "token").write_text(TOKEN)
    with scripted(answer) as server, caplog.at_level(logging.DEBUG):
        good = [
            {"basic_auth": {"username": "alertd", "password_file": str(tmp_path / "password")}},
            {"basic_auth": {"username": "alertd", "password": PASSWORD}},
            {"bearer_token_file": str(tmp_path / "token")},
            {"bearer_token": TOKEN},
        ]
        for auth in good:
            src = build_source(config(server.url, [{"query": "up"}], **auth))
            assert len(await src.poll(T)) == 1
            await src.aclose()
        told = []
        for auth in [{"basic_auth": {"username": "alertd", "password": PASSWORD + "x"}}, {"bearer_token": TOKEN + "x"}]:
            cfg = config(server.url, [{"query": "up"}], **auth)
            src = build_source(cfg)
            with pytest.raises(SourceError) as failed:
                await src.poll(T)
            assert not failed.value.recoverable
            told += [str(failed.value), repr(src), repr(cfg), str(cfg.model_dump())]
            await src.aclose()
        src = build_source(config(server.url, [{"query": "up"}]))
        with pytest.raises(SourceError) as failed:
            await src.poll(T)
        told.append(str(failed.value))
        await src.aclose()
    host = f"127.0.0.1:{server.port}"
    assert told[0] == (
        f"prometheus source prom: Prometheus at {host} refused the credentials (HTTP 401): "
        "check basic_auth (user alertd)"
    )
    assert (
        told[4]
        == f"prometheus source prom: Prometheus at {host} refused the credentials (HTTP 401): check bearer_token"
    )
    assert told[-1].endswith("(HTTP 401): no credentials are set (basic_auth or bearer_token)")
    everything = "\n".join(told) + "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert PASSWORD not in everything and TOKEN not in everything
    assert [s.headers.get("Authorization", "")[:6] for s in server.seen[:4]] == ["Basic ", "Basic ", "Bearer", "Bearer"]


async def test_a_server_without_post_is_asked_with_get_from_then_on() -> None:
    def answer(seen: Seen) -> Reply:
        if seen.method == "POST":
            return Reply(405, b"Method Not Allowed", {"Content-Type": "text/plain"})
        return Reply(body=vector(({"__name__": "up"}, "1" if seen.params["query"] == "up" else "0")))

    with scripted(answer) as server:
        src = PrometheusSource(config(server.url + "/prom/", [{"query": "up"}]))
        assert values(await src.poll(T)) == {'up{source="prom"}': 1.0}
        assert values(await src.poll(T)) == {'up{source="prom"}': 1.0}
        await src.aclose()
    assert [(s.method, s.path) for s in server.seen] == [
        ("POST", "/prom/api/v1/query"),
        ("GET", "/prom/api/v1/query"),
        ("GET", "/prom/api/v1/query"),
    ]
    assert server.seen[1].params["time"] == f"{T:.3f}"


async def test_the_server_failing_fails_the_poll_naming_the_host() -> None:
    table = {
        "404": Reply(404, b"404 page not found", {"Content-Type": "text/plain"}),
        "302": Reply(302, b"", {"Location": "https://user:pw@login.example/sso?token=abc"}),
        "502": Reply(502, b"<html>bad gateway</html>", {"Retry-After": "0"}),
        "429": Reply(429, b"slow down", {"Retry-After": "3600"}),
        "418": Reply(418, b"I'm a teapot"),
    }
    with scripted(by_query(table)) as server:
        host = f"127.0.0.1:{server.port}"
        expected = {
            "404": f"no /api/v1/query at {host} (HTTP 404): check the url (and the path prefix Prometheus is served "
            "under)",
            "302": f"Prometheus at {host} redirects (HTTP 302) to https://login.example/sso: use that address as "
            "the url",
            "502": f"Prometheus at {host}: HTTP 502, giving up after 3 tries",
            "429": f"Prometheus at {host}: HTTP 429, server asks to wait 3600s",
            "418": f"Prometheus at {host}: HTTP 418: I'm a teapot",
        }
        for query, message in expected.items():
            src = PrometheusSource(config(server.url, [{"query": query}, {"query": query}], max_retries=2))
            with pytest.raises(SourceError) as failed:
                await src.poll(T)
            assert str(failed.value) == f"prometheus source prom: {message}"
            assert failed.value.recoverable == (query in ("502", "429"))
            await src.aclose()
    assert [s.params["query"] for s in server.seen].count("502") == 6  # two queries, three tries each


async def test_no_server_is_retried_with_backoff_then_fails() -> None:
    with scripted() as server:
        url = server.url  # a port nothing listens on once the server is gone
    src = PrometheusSource(config(url, [{"query": "up"}], max_retries=2, max_retry_wait="0.05s"))
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"Prometheus at 127.0.0.1:\d+: connection failed \(ConnectError.*3 tries"):
        await src.poll(T)
    assert time.monotonic() - started < 2
    assert src.client.requests == 3
    await src.aclose()


def test_config_errors_name_their_place(tmp_path: Path) -> None:
    def problems(source: str) -> str:
        path = tmp_path / "rules.yaml"
        path.write_text(f"sources:\n  - {source}\n")
        with pytest.raises(ConfigError) as failed:
            load_config([str(path)])
        return str(failed.value)

    base = "{name: prom, type: prometheus, url: 'http://p:9090', queries: [{query: up}]"
    assert "sources[0].queries: List should have at least 1 item" in problems(
        "{name: prom, type: prometheus, url: 'http://p:9090', queries: []}"
    )
    told = problems(f"{{name: prom, type: prometheus, url: 'http://u:{PASSWORD}@p:9090', queries: [{{query: up}}]}}")
    assert "sources[0].url: no user or password in the URL: use basic_auth (password_file)" in told
    assert PASSWORD not in told
    assert "sources[0].url: expected http://host:port" in problems(
        "{name: prom, type: prometheus, url: 'ftp://p', queries: [{query: up}]}"
    )
    assert "sources[0].prometheus: give basic_auth or bearer_token, not both" in problems(
        base + ", basic_auth: {username: a, password: b}, bearer_token: c}"
    )
    assert "sources[0].prometheus: tls is set but the url is not https://" in problems(
        base + ", tls: {insecure_skip_verify: true}}"
    )
    assert "sources[0].queries[0].labels: label source is the source's name: it cannot be set" in problems(
        "{name: prom, type: prometheus, url: 'http://p', queries: [{query: up, labels: {source: x}}]}"
    )
    assert "sources[0].queries[1].labels: label name 'gpu-id': expected letters, digits and _" in problems(
        "{name: prom, type: prometheus, url: 'http://p', queries: [{query: up}, {query: x, labels: {gpu-id: x}}]}"
    )
    assert "sources[0].basic_auth: password_file: cannot read /nonexistent/pw" in problems(
        base + ", basic_auth: {username: a, password_file: /nonexistent/pw}}"
    )
    assert "sources[0].tls: ca_file: cannot read /nonexistent/ca.pem: No such file or directory" in problems(
        "{name: prom, type: prometheus, url: 'https://p', queries: [{query: up}], tls: {ca_file: /nonexistent/ca.pem}}"
    )
    (tmp_path / "x").write_text("not a certificate")
    assert f"sources[0].tls: ca_file: {tmp_path}/x holds no usable PEM certificate" in problems(
        f"{{name: prom, type: prometheus, url: 'https://p', queries: [{{query: up}}], tls: {{ca_file: {tmp_path}/x}}}}"
    )
    assert "sources[0].tls: give cert_file and key_file together" in problems(
        "{name: prom, type: prometheus, url: 'https://p', queries: [{query: up}], tls: {cert_file: /x}}"
    )
    assert "unknown key 'querys'" in problems("{name: prom, type: prometheus, url: 'http://p', querys: [{query: up}]}")
