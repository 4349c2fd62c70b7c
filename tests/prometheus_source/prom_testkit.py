"""Real parts for the prometheus source's tests: a scripted HTTP server answering as Prometheus' API does,
a static exporter, a CA and certificates (the `cryptography` package), and Debian's `prometheus` binary."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from alertd.testing.receiver import free_port

PROMETHEUS = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")


# --- a scripted server ----------------------------------------------------------------------------------------


@dataclass
class Reply:
    """One answer: `status`, `body`, `headers`; `hang` holds the answer back that long first; `trickle` sends
    the body one byte each that many seconds."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0
    trickle: float = 0.0


@dataclass
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, str]


@dataclass
class Scripted:
    """A threaded HTTP server on 127.0.0.1: answers `answer(seen)` (or the next of `replies`) and records
    every request."""

    answer: Callable[[Seen], Reply] | None = None
    replies: list[Reply] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_reply(self, seen: Seen) -> Reply:
        with self.lock:
            self.seen.append(seen)
            if self.replies:
                return self.replies.pop(0)
        if self.answer is not None:
            return self.answer(seen)
        return Reply(500, b"no reply scripted")


def _handler(server: Scripted) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            split = urlsplit(self.path)
            params = parse_qs(raw.decode()) if self.command == "POST" else parse_qs(split.query)
            seen = Seen(self.command, split.path, dict(self.headers.items()), {k: v[0] for k, v in params.items()})
            reply = server.next_reply(seen)
            if reply.hang and server.stop.wait(reply.hang):
                return
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", "Content-Length": str(len(reply.body)), **reply.headers}
            for k, v in headers.items():
                if v:
                    self.send_header(k, v)
            self.end_headers()
            try:
                if reply.trickle:
                    for i in range(len(reply.body)):
                        if server.stop.wait(reply.trickle):
                            return
                        self.wfile.write(reply.body[i : i + 1])
                        self.wfile.flush()
                else:
                    self.wfile.write(reply.body)
            except OSError:
                pass  # the client gave up

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout, an answer over its cap) resets the connection: expected here


@contextlib.contextmanager
def scripted(answer: Callable[[Seen], Reply] | None = None) -> Iterator[Scripted]:
    """A scripted server, stopped on leaving (a held-back answer is let go)."""
    state = Scripted(answer)
    httpd = _Server(("127.0.0.1", 0), _handler(state))
    state.port = httpd.server_address[1]
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield state
    finally:
        state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        t.join()


# --- a static exporter ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def exporter(text: str) -> Iterator[str]:
    """A tiny exporter serving `text` (Prometheus' text exposition) at /metrics; yields its host:port."""

    def answer(seen: Seen) -> Reply:
        return Reply(200, text.encode(), {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    with scripted(answer) as server:
        yield f"127.0.0.1:{server.port}"


# --- TLS ------------------------------------------------------------------------------------------------------


@dataclass
class Ca:
    """A certificate authority: its certificate (PEM at `cert`) and key."""

    cert: Path
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def make_ca(directory: Path, name: str) -> Ca:
    """A self-signed CA, valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(path, cert, key)


def make_server_cert(
    ca: Ca, directory: Path, dns: list[str], ips: list[str], *, client: bool = False
) -> tuple[Path, Path]:
    """A server certificate for these names, signed by `ca`: (cert file, key file); `client`: a client
    certificate instead (named by the first DNS name)."""
    usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns or ips)[0])]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    kind = "client" if client else "server"
    crt, pem = directory / f"{kind}.crt", directory / f"{kind}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pem)
    return crt, pem


# --- Debian's prometheus ----------------------------------------------------------------------------------------

CONFIG = """\
global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: dcgm
    static_configs: [{{targets: ["{target}"]}}]
"""


@dataclass
class Prometheus:
    """A running Prometheus: its URL, and how to reach it (`verify`, `auth`) for the test's own checks."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    verify: Any = True
    auth: tuple[str, str] | None = None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query (the test's own client: httpx)."""
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, verify=self.verify, auth=self.auth)
        resp.raise_for_status()
        result: list[dict[str, Any]] = resp.json()["data"]["result"]
        return result

    def wait_scraped(self, expr: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until `expr` has a result (the exporter scraped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n{self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                result = self.query(expr)
                if result:
                    return result
            time.sleep(0.1)
        raise AssertionError(f"prometheus had no {expr} after {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def prometheus_binary() -> str:
    """Debian's prometheus (or PROMETHEUS_BIN); the test fails with the install line if it is missing."""
    binary = shutil.which(PROMETHEUS) or shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            f"Prometheus binary {PROMETHEUS} not found: install it with `apt-get install prometheus` "
            "(or set PROMETHEUS_BIN)",
            pytrace=False,
        )
    return binary


def start_prometheus(directory: Path, target: str, web_config: str | None = None) -> Prometheus:
    """Prometheus scraping `target` every second, on a free port of 127.0.0.1, its data under `directory`
    (`web_config`: the text of a `--web.config.file`: TLS, basic auth). Not waited for: see `wait_scraped`."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(CONFIG.format(target=target))
    port = free_port()
    argv = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    scheme = "http"
    if web_config is not None:
        web = directory / "web.yml"
        web.write_text(web_config)
        argv.append(f"--web.config.file={web}")
        scheme = "https" if "tls_server_config" in web_config else "http"
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=directory)
    return Prometheus(f"{scheme}://127.0.0.1:{port}", proc, log)
