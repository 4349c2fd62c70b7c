"""The alertmanager notifier's keys: peers, path_prefix, basic auth, bearer token, TLS; every error names its
place and shows no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from alertd.config import load_config
from alertd.errors import ConfigError
from alertd.notify.alertmanager import AlertmanagerNotifier
from alertd.notify.config import AlertmanagerConfig

SECRET = "hunter2-very-secret"


def _check(tmp_path: Path, notifier: str) -> str:
    """`alertd check`'s message for a rules file with this notifier (flow YAML), or '' when it loads."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"notifiers:\n  am: {notifier}\nroute: {{receivers: [am]}}\nrules: []\n")
    try:
        load_config([str(rules)], {})
    except ConfigError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize(
    ("notifier", "error"),
    [
        ("{type: alertmanager}", "notifiers.am.alertmanager: give url (one Alertmanager) or urls"),
        (
            "{type: alertmanager, url: 'http://a:9093', urls: ['http://b:9093']}",
            "notifiers.am.alertmanager: give url (one Alertmanager) or urls (every peer of the cluster), not both",
        ),
        (
            f"{{type: alertmanager, urls: ['http://a:9093', 'ftp://u:{SECRET}@b']}}",
            "notifiers.am.alertmanager: urls[1] must be http(s)://host[:port][/prefix]",
        ),
        (
            f"{{type: alertmanager, urls: ['http://a:9093', 'http://u:{SECRET}@b:99999']}}",
            "notifiers.am.alertmanager: urls[1]: the port is not a number from 1 to 65535",
        ),
        (
            "{type: alertmanager, urls: ['http://am1:9093', 'http://AM1:9093/']}",
            "notifiers.am.alertmanager: urls[1]: the same Alertmanager is listed twice",
        ),
        (
            "{type: alertmanager, url: 'http://a:9093/x?token=1'}",
            "notifiers.am.alertmanager: url must not have a query or a fragment",
        ),
        (
            "{type: alertmanager, url: 'http://a:9093/am', path_prefix: /am}",
            "url has a path and path_prefix is set: give the prefix in one place",
        ),
        ("{type: alertmanager, url: 'http://a', path_prefix: '/../x'}", "notifiers.am.path_prefix: path_prefix"),
        (
            f"{{type: alertmanager, url: 'http://a', basic_auth: {{username: u, password: {SECRET}}}, "
            "bearer_token: t}",
            "notifiers.am.alertmanager: give one way to authenticate, not basic_auth and bearer_token",
        ),
        (
            f"{{type: alertmanager, url: 'http://u:{SECRET}@a', bearer_token: t}}",
            "give one way to authenticate, not bearer_token and credentials in a url",
        ),
        (
            "{type: alertmanager, url: 'http://a', basic_auth: {username: u, password_file: /nonexistent/pw}}",
            "notifiers.am.basic_auth: password_file: cannot read /nonexistent/pw: No such file or directory",
        ),
        (
            "{type: alertmanager, url: 'http://a', bearer_token_file: /nonexistent/tok}",
            "bearer_token_file: cannot read /nonexistent/tok: No such file or directory",
        ),
        (
            "{type: alertmanager, url: 'https://a', tls: {ca_file: /nonexistent/ca.pem}}",
            "notifiers.am.tls: ca_file: cannot read /nonexistent/ca.pem: No such file or directory",
        ),
        (
            "{type: alertmanager, url: 'https://a', tls: {cert_file: /x.pem}}",
            "notifiers.am.tls: give cert_file and key_file together",
        ),
        ("{type: alertmanager, url: 'http://a', tls: {insecure_skip_verify: true}}", "tls is set but no url is https"),
        ("{type: alertmanager, url: 'http://a', timeout: 0s}", "timeout must be more than 0s"),
    ],
)
def test_a_bad_notifier_is_an_error_naming_its_place_without_secrets(tmp_path: Path, notifier: str, error: str) -> None:
    message = _check(tmp_path, notifier)
    assert error in message
    assert message.startswith(f"{tmp_path / 'rules.yaml'}:2: ")
    assert SECRET not in message


def test_a_ca_file_that_holds_no_certificate_is_an_error(tmp_path: Path) -> None:
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    message = _check(tmp_path, f"{{type: alertmanager, url: 'https://a', tls: {{ca_file: {junk}}}}}")
    assert f"notifiers.am.tls: ca_file: {junk} holds no usable PEM certificate" in message


def test_secrets_come_from_files_and_never_show(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(SECRET + "\n")
    (tmp_path / "tok").write_text(SECRET + "-token\n")
    basic = AlertmanagerConfig.model_validate(
        {
            "type": "alertmanager",
            "urls": ["http://am1:9093", "http://am2:9093"],
            "path_prefix": "/alertmanager/",
            "basic_auth": {"username": "alertd", "password_file": str(tmp_path / "pw")},
        }
    )
    assert basic.basic_auth is not None and basic.basic_auth.password.get_secret_value() == SECRET
    assert basic.path_prefix == "/alertmanager"
    assert SECRET not in repr(basic) and SECRET not in str(basic.model_dump())
    notifier = AlertmanagerNotifier("am", basic)
    assert [str(p.endpoint) for p in notifier.peers] == [
        "http://am1:9093/alertmanager/api/v2/alerts",
        "http://am2:9093/alertmanager/api/v2/alerts",
    ]
    assert [p.where for p in notifier.peers] == [
        "alertmanager notifier 'am' (http://am1:9093)",
        "alertmanager notifier 'am' (http://am2:9093)",
    ]
    bearer = AlertmanagerConfig.model_validate(
        {"type": "alertmanager", "url": "http://am1:9093/prefix", "bearer_token_file": str(tmp_path / "tok")}
    )
    assert bearer.bearer_token is not None and bearer.bearer_token.get_secret_value() == SECRET + "-token"
    assert str(AlertmanagerNotifier("am", bearer).peers[0].endpoint) == "http://am1:9093/prefix/api/v2/alerts"
