"""Fixtures of the e-mail tests: a real SMTP server and a self-signed certificate (see smtp_testkit)."""

from __future__ import annotations

from smtp_testkit import cert, smtp_server

__all__ = ["cert", "smtp_server"]
