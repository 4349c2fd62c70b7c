"""alertd.integrations without the frameworks: the modules import, the callbacks refuse with an ImportError."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = textwrap.dedent(
    """
    import sys
    for name in ("transformers", "lightning", "pytorch_lightning"):
        sys.modules[name] = None  # `import name` now raises ImportError, as when it is not installed

    import alertd.integrations
    import alertd.integrations.lightning as pl
    import alertd.integrations.transformers as hf

    assert "torch" not in sys.modules, "importing the integrations must not import torch"
    for module, package in ((hf, "transformers"), (pl, "lightning")):
        try:
            module.AlertdCallback()
        except ImportError as e:
            assert f"`{package}` package" in str(e), str(e)
            print(f"{package}: {e}")
        else:
            raise SystemExit(f"{module.__name__}.AlertdCallback() did not raise ImportError")
    """
)


def test_integrations_import_without_the_frameworks() -> None:
    """With transformers, lightning and pytorch_lightning unimportable, both modules import; the callbacks raise."""
    result = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "transformers: alertd.integrations.transformers.AlertdCallback needs the `transformers` package "
        "(pip install transformers)",
        "lightning: alertd.integrations.lightning.AlertdCallback needs the `lightning` package "
        "(pip install lightning; or pytorch_lightning)",
    ]
