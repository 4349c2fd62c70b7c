"""The prometheus source's tests: its kit (prom_testkit) and alertd as a subprocess (tests/service)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "service"))  # service_helpers: alertd as a subprocess
