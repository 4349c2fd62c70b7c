"""What keeps the API to its users: a token file that is empty or missing stops alertd at start (the real
process: exit status and one line naming the file), a foreign `Host` header is refused (DNS rebinding), and
a state-changing request must be JSON (an HTML form post is refused with 415)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_helpers import Served, free_port, make_env, serving

from alertd.api.hosts import AllowedHosts, host_name, split_hosts
from alertd.service import Service

RULES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
notifiers: {{console: {{type: log}}}}
route: {{receivers: [console], group_wait: 0s}}
rules:
  - {{name: loss_nan, metric: train/loss, condition: nonfinite}}
"""
SILENCE = {"matchers": [{"name": "run", "value": "exp1"}], "duration": "1h", "createdBy": "me", "comment": "c"}
FORM = {"content-type": "application/x-www-form-urlencoded"}


def _clean_env(**env: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ALERTD_API_TOKEN")} | env


def _start(tmp_path: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(samples=samples))
    cmd = [sys.executable, "-m", "alertd", *argv, "--rules", str(rules), "--listen", f"127.0.0.1:{free_port()}"]
    env = _clean_env(**env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)


def test_an_empty_token_file_stops_alertd_at_start_naming_the_file(tmp_path: Path) -> None:
    token = tmp_path / "api-token"
    token.write_text("\n")
    done = _start(tmp_path, {"ALERTD_API_TOKEN_FILE": str(token)}, "run", "--state-dir", str(tmp_path / "state"))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"ALERTD_API_TOKEN_FILE: {token} is empty" in out, out
    assert "Traceback" not in out and len([line for line in out.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "state").exists()  # nothing was started


def test_alertd_exec_with_an_empty_token_file_exits_2_and_starts_no_child(tmp_path: Path) -> None:
    token = tmp_path / "api-token"
    token.write_text("")
    marker = tmp_path / "child-ran"
    argv = [sys.executable, "-m", "alertd", "exec", "--listen", f"127.0.0.1:{free_port()}"]
    argv += ["--state-dir", str(tmp_path / "s"), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    env = _clean_env(ALERTD_API_TOKEN_FILE=str(token))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert f"ALERTD_API_TOKEN_FILE: {token} is empty" in out and "Traceback" not in out
    assert not marker.exists()  # the child is not started


def test_a_missing_token_file_stops_alertd_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    done = _start(tmp_path, {"ALERTD_API_TOKEN_FILE": str(missing)}, "run", "--state-dir", str(tmp_path / "state"))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"ALERTD_API_TOKEN_FILE: cannot read {missing}: No such file or directory" in out
    assert "Traceback" not in out and len([line for line in out.splitlines() if line.strip()]) == 1


def test_a_blank_token_variable_stops_alertd(tmp_path: Path) -> None:
    done = _start(tmp_path, {"ALERTD_API_TOKEN": "  "}, "run", "--state-dir", str(tmp_path / "state"))
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "ALERTD_API_TOKEN is set but empty" in out, out


def test_a_token_file_guards_the_api(tmp_path: Path) -> None:
    token = tmp_path / "api-token"
    token.write_text("file-s3cret\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Served(tmp_path, RULES.format(samples=samples), env={"ALERTD_API_TOKEN_FILE": str(token)}) as alertd:
        assert alertd.get("/api/v1/silences").status_code == 401
        ok = alertd.client.get("/api/v1/silences", headers={"Authorization": "Bearer file-s3cret"})
        assert ok.status_code == 200
        assert alertd.stop() == 0
    assert "file-s3cret" not in alertd.logs()


def test_host_names_answered() -> None:
    local = AllowedHosts("127.0.0.1")
    for host in (b"127.0.0.1:9090", b"localhost:8080", b"LOCALHOST", b"[::1]:9090", b"127.0.0.2", b"localhost."):
        assert local.allows(host), host
    for host in (b"evil.example:9090", b"10.0.0.5", b"myhost", b"localhost.evil.example"):
        assert not local.allows(host), host
    assert local.allows(None)
    every = AllowedHosts("0.0.0.0", names=["gpu1", "gpu1.example"])
    for host in (b"10.1.2.3:9090", b"[fe80::1]:9090", b"localhost", b"gpu1:9090", b"GPU1.example"):
        assert every.allows(host), host
    assert not every.allows(b"evil.example") and not every.allows(b"gpu1.example.evil.example")
    one = AllowedHosts("10.0.0.5", split_hosts("alertd.svc, *.corp.example"), names=["gpu1"])
    for host in (b"10.0.0.5:9090", b"gpu1", b"alertd.svc:80", b"a.corp.example", b"b.a.corp.example"):
        assert one.allows(host), host
    for host in (b"10.0.0.6", b"localhost", b"corp.example", b"evilcorp.example"):
        assert not one.allows(host), host
    assert AllowedHosts("127.0.0.1", ["*"]).allows(b"anything.example")
    assert host_name("[::1]:80") == "::1" and host_name("Example.COM.:443") == "example.com"


@pytest.mark.anyio
async def test_a_foreign_host_is_refused_and_the_listened_host_answered(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        port = client.base_url.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            r = await client.get("/api/v1/silences", headers={"Host": host})
            assert r.status_code == 200, (host, r.text)
            assert (await client.get("/metrics", headers={"Host": host})).status_code == 200
        for path in ("/api/v1/silences", "/metrics", "/", "/api/v2/status"):
            r = await client.get(path, headers={"Host": f"rebound.evil.example:{port}"})
            assert r.status_code == 421, (path, r.text)
            assert "does not answer to that Host" in r.text and len(r.content) < 200
        r = await client.post("/api/v1/reload", json={}, headers={"Host": "rebound.evil.example"})
        assert r.status_code == 421
        # the probes tell nothing: answered to any name
        assert (await client.get("/healthz", headers={"Host": "lb.internal"})).status_code == 200


@pytest.mark.anyio
async def test_names_from_the_environment_are_answered(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, api_hosts=split_hosts("alertd.monitoring.svc")) as client:
        assert (await client.get("/metrics", headers={"Host": "alertd.monitoring.svc:9090"})).status_code == 200
        assert (await client.get("/metrics", headers={"Host": "other.svc:9090"})).status_code == 421


def test_the_real_service_reads_alertd_api_hosts(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Served(tmp_path, RULES.format(samples=samples), env={"ALERTD_API_HOSTS": "alertd.example"}) as alertd:
        assert alertd.client.get("/api/v1/rules", headers={"Host": "alertd.example"}).status_code == 200
        assert alertd.client.get("/api/v1/rules", headers={"Host": "evil.example"}).status_code == 421
        assert alertd.stop() == 0


@pytest.mark.anyio
async def test_a_form_post_changes_nothing_and_json_does(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        # An HTML form (or a no-cors fetch) of another site: refused before anything is done
        for path, data in (("/api/v1/reload", ""), ("/api/v1/silences", "matchers=x"), ("/api/v1/dry-run", "a=b")):
            r = await client.post(path, content=data, headers=FORM)
            assert r.status_code == 415, (path, r.text)
            assert "needs Content-Type: application/json" in r.text
        r = await client.post("/api/v2/silences", content=json.dumps(SILENCE), headers={"content-type": "text/plain"})
        assert r.status_code == 415
        r = await client.post("/api/v1/reload")  # no content type at all (fetch with no body)
        assert r.status_code == 415
        assert (await client.get("/api/v1/silences")).json() == []
        # JSON works
        assert (await client.post("/api/v1/reload", json={})).status_code == 200
        made = await client.post("/api/v1/silences", json=SILENCE)
        assert made.status_code == 200, made.text
        sid = made.json()["id"]
        r = await client.request("DELETE", f"/api/v1/silences/{sid}", content="x=1", headers=FORM)
        assert r.status_code == 415
        assert (await client.delete(f"/api/v1/silences/{sid}")).status_code == 200  # amtool's and the page's
        assert (await client.get("/api/v1/silences")).json()[0]["status"]["state"] == "expired"


@pytest.mark.anyio
async def test_with_the_token_the_content_type_is_not_asked(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, token="t0k") as client:
        r = await client.post("/api/v1/reload", headers=FORM)
        assert r.status_code == 401  # no token: 401 first
        r = await client.post("/api/v1/reload", headers={"Authorization": "Bearer t0k"})
        assert r.status_code == 200, r.text
