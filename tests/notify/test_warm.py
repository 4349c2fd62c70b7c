"""`warm_http`: the service makes, at start-up, the imports that httpx's first request would make, so that the
first notification after a start does not wait ~20 ms for them (a fresh interpreter, a real request)."""

from __future__ import annotations

import json
import subprocess
import sys

from alertd.testing.receiver import Receiver

SCRIPT = """
import asyncio, json, sys
sys.path.insert(0, "tests/notify")
from notify_helpers import notification, webhook
from alertd.notify.warm import warm_http

async def main(url, warm):
    notifier = webhook(url)  # built before the warm-up, as the service builds its notifiers
    if warm:
        await warm_http()
    before = set(sys.modules)
    await notifier.send(notification())
    return sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("anyio", "httpcore", "httpx"))

print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2] == "warm"))))
"""


def first_request_imports(url: str, warm: bool) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, url, "warm" if warm else "cold"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    imported: list[str] = json.loads(out.stdout)
    return imported


def test_after_warm_http_the_first_request_imports_nothing_of_httpx_or_its_backend() -> None:
    receiver = Receiver()
    try:
        assert "anyio._backends._asyncio" in first_request_imports(receiver.url, warm=False)  # what it spares
        assert first_request_imports(receiver.url, warm=True) == []
        assert len(receiver.recorder.bodies) == 2
    finally:
        receiver.stop()
