"""Secrets read from files: `<field>_file: /run/secrets/x` instead of `<field>: ...` (Kubernetes Secret volumes,
Docker secrets), for notifiers and sources alike."""

from __future__ import annotations

from typing import Any

MAX_SECRET_FILE = 64 * 1024
"""The most bytes a `<field>_file` secret file may hold."""


def read_secret_file(path: object, key: str) -> str:
    """The content of the file a `<field>_file` key names (Kubernetes Secret volumes, Docker secrets): read
    once at load, at most MAX_SECRET_FILE bytes, one trailing newline dropped. Errors name the key and the
    path, never the content."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"{key}: expected the path of a file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_FILE + 1)
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_SECRET_FILE:
        raise ValueError(f"{key}: {path} is larger than {MAX_SECRET_FILE} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{key}: {path} is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise ValueError(f"{key}: {path} is empty")
    return text


def secrets_from_files(data: Any, fields: tuple[str, ...]) -> Any:
    """`data` (a notifier's or a source's mapping) with each `<field>_file` replaced by `<field>` read from
    that file."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name in fields:
        key = f"{name}_file"
        if key not in out:
            continue
        path = out.pop(key)
        if name in out:
            raise ValueError(f"give {name} or {key}, not both")
        out[name] = read_secret_file(path, key)
    return out
