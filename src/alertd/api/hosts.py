"""Which `Host` headers the API answers (DNS rebinding), and which requests may change state (CSRF).

A web page on another site can't read alertd's answers, unless its name resolves to alertd's address
(DNS rebinding): the browser then sends that name in `Host`. So the API answers only the names it is
reached by (`AllowedHosts`, from the `--listen` address and `ALERTD_API_HOSTS`), 421 otherwise. The port
in `Host` is not looked at (a port-forward or a proxy changes it), nor is an IP address, which no
rebinding can give, on a service listening on every address.

- `--listen 127.0.0.1` (or ::1, any loopback address, `localhost`): `localhost` and the loopback addresses;
- `--listen 0.0.0.0` (or `::`): any IP address, `localhost`, this machine's names (`hostname`, `hostname -f`);
- `--listen ADDRESS` (another address or a name): that address or name and this machine's names;
- always the names of `ALERTD_API_HOSTS` (comma- or space-separated; `*.example.com` covers the names under
  example.com; `*` turns the check off). A request without `Host` (HTTP/1.0, never a browser) is answered.

A state-changing request (any method but GET, HEAD and OPTIONS) must say its body is JSON
(`Content-Type: application/json` or `application/*+json`), or carry the bearer token: an HTML form, or
a script of another site without a CORS preflight (which alertd never grants), can send neither. A
DELETE without a body and without a content type is taken: no form and no "simple" cross-site request
can send a DELETE (amtool's `silence expire` sends none).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterable

ENV = "ALERTD_API_HOSTS"
"""The names the API answers besides those of its `--listen` address."""
SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def loopback(host: str) -> bool:
    """Whether `host` (a name or an address, no port) is `localhost` or a loopback address."""
    ip = _ip(host)
    return host == "localhost" or (ip is not None and ip.is_loopback)


def host_name(header: str) -> str:
    """The name or address of a `Host` header without its port, lower case, brackets and a final dot dropped."""
    text = header.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") == 1:
        text = text.partition(":")[0]
    return text.rstrip(".")


def split_hosts(text: str) -> list[str]:
    """The names of an `ALERTD_API_HOSTS` value: comma- or space-separated, each without its port."""
    return [host_name(part) if part.strip() != "*" else "*" for part in text.replace(",", " ").split()]


def machine_names() -> list[str]:
    """This machine's names (`hostname` and `hostname -f`); may look the name up (call it once, off the loop)."""
    names = [socket.gethostname()]
    with contextlib.suppress(OSError):
        names.append(socket.getfqdn())
    return [n for n in names if n]


class AllowedHosts:
    """The `Host` names the API answers (see the module docstring)."""

    def __init__(self, listen_host: str, extra: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        host = host_name(listen_host) or "127.0.0.1"
        ip = _ip(host)
        self.any = False
        self.any_ip = ip is not None and ip.is_unspecified
        self.local = loopback(host) or self.any_ip
        self.exact: set[str] = set()
        self.suffixes: list[str] = []
        if not loopback(host):
            self.exact |= {host_name(n) for n in names}
            if not self.any_ip:
                self.exact.add(host)
        for name in extra:
            if name == "*":
                self.any = True
            elif name.startswith("*."):
                self.suffixes.append(name[1:])
            elif name:
                self.exact.add(name)

    def allows(self, header: bytes | None) -> bool:
        """Whether a request with this `Host` header (None: without one) is answered."""
        if header is None or self.any:
            return True
        host = host_name(header.decode("latin-1"))
        if host in self.exact or any(host.endswith(s) for s in self.suffixes):
            return True
        if self.local and loopback(host):
            return True
        return self.any_ip and _ip(host) is not None


def json_content_type(header: bytes | None) -> bool:
    """Whether a `Content-Type` header says JSON (`application/json`, `application/*+json`, any parameters)."""
    if header is None:
        return False
    kind = header.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))
