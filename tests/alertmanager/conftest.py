"""Fixtures of the Alertmanager tests: a real Alertmanager child process and a recording HTTP server."""

from __future__ import annotations

from am_testkit import alertmanager, recorder

__all__ = ["alertmanager", "recorder"]
