from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "api"))  # api_helpers: the API served on 127.0.0.1
