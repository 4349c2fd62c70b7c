"""Fixtures of the Alertmanager tests: a real Alertmanager child process and a recording HTTP server."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "service"))  # service_helpers: alertd as a subprocess

from am_testkit import alertmanager, recorder

__all__ = ["alertmanager", "recorder"]
