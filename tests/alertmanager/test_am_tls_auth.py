"""The alertmanager notifier against a real Alertmanager 0.25 behind TLS and basic auth (`--web.config.file`),
served under /alertmanager (`--web.route-prefix`): one Alertmanager for the module, a CA and certificates
made here with `cryptography`, the password hashed with `bcrypt` (a test dependency)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from am_testkit import GROUP_WAIT, Alertmanager, recording_server, running_alertmanager
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.alertmanager import AlertmanagerNotifier
from alertd.notify.config import AlertmanagerConfig

USER, PASSWORD = "alertd", "s3cret-Pa55word"
PREFIX = "/alertmanager"
CONFIG = """\
route: {receiver: rec, group_by: [alertname], group_wait: 200ms, group_interval: 1s}
receivers: [{name: rec, webhook_configs: [{url: "WEBHOOK/hook"}]}]
"""


def _bcrypt(password: str) -> str:
    try:
        import bcrypt
    except ImportError:
        pytest.fail("bcrypt is not installed: pip install 'bcrypt>=4' (test extra)", pytrace=False)
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()  # cost 4: the least, fast


@dataclass
class Pki:
    """PEM files: a CA, a server certificate for 127.0.0.1 it signed, a client certificate it signed, and a
    second CA that signed nothing the server shows."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    elif subject == "127.0.0.1":
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.with_suffix(".key").write_bytes(pem)
    return path


def make_pki(d: Path) -> Pki:
    ca_key, other_key, server_key, client_key, other_client_key = (_key() for _ in range(5))
    ca = _write(d / "ca.pem", _cert("alertd test CA", ca_key, "alertd test CA", ca_key, ca=True))
    other = _write(d / "other-ca.pem", _cert("some other CA", other_key, "some other CA", other_key, ca=True))
    server = _write(d / "server.pem", _cert("127.0.0.1", server_key, "alertd test CA", ca_key, ca=False), server_key)
    client = _write(d / "client.pem", _cert("alertd", client_key, "alertd test CA", ca_key, ca=False), client_key)
    stranger = _cert("alertd", other_client_key, "some other CA", other_key, ca=False)
    other_client = _write(d / "other-client.pem", stranger, other_client_key)
    return Pki(
        ca,
        server,
        server.with_suffix(".key"),
        client,
        client.with_suffix(".key"),
        other,
        other_client,
        other_client.with_suffix(".key"),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_am(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Alertmanager]:
    """Alertmanager over TLS (a client certificate verified if given), basic auth, under /alertmanager."""
    d = tmp_path_factory.mktemp("secure-am")
    web = d / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {pki.ca}\n"
        f"basic_auth_users:\n  {USER}: {_bcrypt(PASSWORD)}\n"
    )
    trust = ssl.create_default_context(cafile=str(pki.ca))
    with recording_server() as webhook:
        config = CONFIG.replace("WEBHOOK", webhook.url)
        with running_alertmanager(
            d, webhook, config, f"--web.config.file={web}", f"--web.route-prefix={PREFIX}",
            scheme="https", prefix=PREFIX, verify=trust, auth=(USER, PASSWORD),
        ) as am:  # fmt: skip
            yield am


def _firing(rule: str) -> Notification:
    now = time.time()
    t = Transition(
        rule, TransitionKind.FIRING, now, 7, float("nan"), make_labels({"run": "exp1"}), "critical", (), now - 1
    )
    return Notification("am", "g", (), "firing", (t,), f"k-{rule}", now)


def _https(am: Alertmanager) -> str:
    return am.url.removesuffix(PREFIX)  # https://127.0.0.1:PORT: the prefix goes in path_prefix


def _config(am: Alertmanager, tmp_path: Path, **kw: Any) -> AlertmanagerConfig:
    secret = tmp_path / "am-password"
    secret.write_text(PASSWORD + "\n")
    data: dict[str, Any] = {
        "type": "alertmanager",
        "url": _https(am),
        "path_prefix": PREFIX,
        "timeout": "3s",
        "basic_auth": {"username": USER, "password_file": str(secret)},
        **kw,
    }
    return AlertmanagerConfig.model_validate(data)


async def _send(cfg: AlertmanagerConfig, rule: str) -> None:
    notifier = AlertmanagerNotifier("am", cfg)
    try:
        await notifier.send(_firing(rule))
    finally:
        await notifier.aclose()


def _names(am: Alertmanager) -> set[str]:
    return {a["labels"]["alertname"] for a in am.alerts()}


@pytest.mark.anyio
async def test_alerts_arrive_with_the_password_the_ca_and_the_path_prefix(
    secure_am: Alertmanager, pki: Pki, tmp_path: Path
) -> None:
    await _send(_config(secure_am, tmp_path, tls={"ca_file": str(pki.ca)}), "tls_ok")
    assert "tls_ok" in _names(secure_am)
    hooked = secure_am.webhook.wait_for(1, timeout=10 * GROUP_WAIT + 5)
    assert any(a["labels"]["alertname"] == "tls_ok" for _, body in hooked for a in body["alerts"])
    # With a client certificate the CA signed, too (the server verifies one when it is given).
    tls = {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    await _send(_config(secure_am, tmp_path, tls=tls), "client_cert_ok")
    assert "client_cert_ok" in _names(secure_am)


@pytest.mark.anyio
async def test_a_wrong_password_is_a_final_401_that_does_not_show_it(
    secure_am: Alertmanager, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "Wr0ng-pa55-xyzzy"
    cfg = _config(secure_am, tmp_path, tls={"ca_file": str(pki.ca)}, basic_auth={"username": USER, "password": wrong})
    with pytest.raises(NotifyError) as err:
        await _send(cfg, "wrong_password")
    message = str(err.value)
    assert not err.value.recoverable
    assert message.startswith(f"alertmanager notifier 'am' ({_https(secure_am)}) answered 401: Unauthorized")
    assert "check the credentials: basic_auth" in message
    assert wrong not in message and wrong not in caplog.text and wrong not in repr(cfg)
    assert "wrong_password" not in _names(secure_am)
    # No credentials at all: the same 401, saying none were given.
    cfg = AlertmanagerConfig.model_validate(
        {"type": "alertmanager", "url": _https(secure_am), "path_prefix": PREFIX, "tls": {"ca_file": str(pki.ca)}}
    )
    with pytest.raises(NotifyError, match=r"answered 401: .*no credentials"):
        await _send(cfg, "no_password")


@pytest.mark.anyio
async def test_a_certificate_from_an_unknown_ca_is_a_final_tls_error(
    secure_am: Alertmanager, pki: Pki, tmp_path: Path
) -> None:
    for tls in ({"ca_file": str(pki.other_ca)}, None):  # another CA; the default trust store (certifi)
        cfg = _config(secure_am, tmp_path, **({"tls": tls} if tls else {}))
        with pytest.raises(NotifyError) as err:
            await _send(cfg, "unknown_ca")
        assert not err.value.recoverable
        assert str(err.value) == (
            f"alertmanager notifier 'am' ({_https(secure_am)}): TLS error: the server's certificate is not trusted "
            "(unable to get local issuer certificate); check tls.ca_file"
        )
        assert PASSWORD not in str(err.value)
    # insecure_skip_verify trusts any certificate (for tests only).
    await _send(_config(secure_am, tmp_path, tls={"insecure_skip_verify": True}), "skip_verify")
    assert "skip_verify" in _names(secure_am)


@pytest.mark.anyio
async def test_a_client_certificate_the_server_does_not_trust_is_refused(
    secure_am: Alertmanager, pki: Pki, tmp_path: Path
) -> None:
    tls = {"ca_file": str(pki.ca), "cert_file": str(pki.other_client_cert), "key_file": str(pki.other_client_key)}
    with pytest.raises(NotifyError) as err:
        await _send(_config(secure_am, tmp_path, tls=tls), "bad_client_cert")
    assert "TLS error" in str(err.value) or "cannot connect" in str(err.value)
    assert PASSWORD not in str(err.value)
    assert "bad_client_cert" not in _names(secure_am)
