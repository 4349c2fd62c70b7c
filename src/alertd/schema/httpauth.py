"""How alertd authenticates to an HTTP server and trusts it, as Prometheus' clients take it: `basic_auth`
and `tls` (its `tls_config`). Shared by the sources and the notifiers that talk to Prometheus-world servers
(the `prometheus` source, the `alertmanager` notifier)."""

from __future__ import annotations

import ssl
from typing import Any

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from alertd.schema.secretfiles import secrets_from_files
from alertd.schema.types import Strict


class BasicAuthConfig(Strict):
    """HTTP basic auth: `username` and `password` (or `password_file`, read at load)."""

    model_config = ConfigDict(**Strict.model_config, hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        return secrets_from_files(data, ("password",))

    username: str = Field(min_length=1)
    password: SecretStr

    @field_validator("username")
    @classmethod
    def _no_colon(cls, username: str) -> str:
        if ":" in username:
            raise ValueError("username must not contain ':' (basic auth can't carry it)")
        return username


class TLSConfig(Strict):
    """How to trust an https server and prove who we are to it (Prometheus' `tls_config`).

    `ca_file`: PEM certificates to trust instead of the default bundle (certifi's, which alertd's HTTP client
    trusts without `tls:`); `cert_file` and `key_file` (both or neither): a client certificate;
    `insecure_skip_verify`: trust any certificate (tests only). The files are read at load, so `alertd check`
    tells a missing or bad one (a renewed file is read again when its source or notifier is made anew).
    """

    ca_file: str | None = Field(default=None, min_length=1)
    cert_file: str | None = Field(default=None, min_length=1)
    key_file: str | None = Field(default=None, min_length=1)
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _loads(self) -> TLSConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give cert_file and key_file together (a client certificate and its key)")
        self.ssl_context()
        return self

    def ssl_context(self) -> ssl.SSLContext:
        """A client context with these settings; ValueError naming the key of a file that can't be used."""
        if self.ca_file is not None:
            _check_readable(self.ca_file, "ca_file")
            try:
                ctx = ssl.create_default_context(cafile=self.ca_file)
            except ssl.SSLError as exc:
                raise ValueError(f"ca_file: {self.ca_file} holds no usable PEM certificate ({exc.reason})") from None
        else:
            ctx = ssl.create_default_context(cafile=_default_ca_file())
        if self.cert_file is not None and self.key_file is not None:
            _check_readable(self.cert_file, "cert_file")
            _check_readable(self.key_file, "key_file")
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file, password=lambda: b"")
            except (ssl.SSLError, ValueError) as exc:
                why = getattr(exc, "reason", None) or "not a PEM certificate and its unencrypted key"
                raise ValueError(f"cert_file/key_file: {self.cert_file} and {self.key_file}: {why}") from None
        if self.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def _check_readable(path: str, key: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror or type(exc).__name__}") from None


def _default_ca_file() -> str | None:
    """certifi's bundle, which httpx trusts by default, so that `tls:` without `ca_file` trusts the same."""
    try:
        import certifi
    except ImportError:
        return None
    return str(certifi.where())
