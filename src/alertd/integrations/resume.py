"""Where a restarted run resumes: the checkpoint `alertd exec` chose for it; framework-free.

When `alertd exec` starts a crashed run again (`exec: {restart: ...}`), it looks in the checkpoint ledger
(`alertd.integrations.ledger`) of the directory `checkpoints:` names for the newest checkpoint whose weights were
finite and that still exists, and gives it to the new child in `ALERTD_RESUME_FROM` (and the ledger's directory in
`ALERTD_CHECKPOINTS`). A script changes by one line:

    from alertd.integrations.resume import resume_from

    trainer.train(resume_from_checkpoint=resume_from())      # Hugging Face Trainer
    trainer.fit(model, ckpt_path=resume_from())              # Lightning

`resume_from()` is None on a first start (training starts from scratch), and whenever the path is gone or the
ledger does not say its weights were finite.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from alertd.integrations.ledger import LEDGER_NAME, is_good, read

log = logging.getLogger("alertd.integrations")

RESUME_ENV = "ALERTD_RESUME_FROM"
"""The checkpoint a restarted child resumes from (set by `alertd exec` on a restart)."""
CHECKPOINTS_ENV = "ALERTD_CHECKPOINTS"
"""The directory of the checkpoint ledger (set by `alertd exec` when it knows one)."""
ATTEMPT_ENV = "ALERTD_ATTEMPT"
"""The attempt of the run this child is, 1 at the first start (set by `alertd exec` under a restart policy)."""
LEDGER_LEVELS = 4
"""Directories above the checkpoint looked at for its ledger when `ALERTD_CHECKPOINTS` is not set (HF:
`<output_dir>/checkpoint-30`; Lightning: `<root>/lightning_logs/version_0/checkpoints/last.ckpt`)."""


def resume_from() -> str | None:
    """The checkpoint to resume from: `ALERTD_RESUME_FROM` if it exists and its ledger says it was saved with finite
    weights; else None (start from scratch)."""
    path = os.environ.get(RESUME_ENV)
    if not path:
        return None
    path = os.path.abspath(path)
    ledger = os.environ.get(CHECKPOINTS_ENV)
    dirs = [Path(ledger)] if ledger else [p for p in Path(path).parents][:LEDGER_LEVELS]
    for directory in dirs:
        if not (directory / LEDGER_NAME).is_file():
            continue
        entries = [e for e in read(directory) if isinstance(e.get("path"), str) and os.path.abspath(e["path"]) == path]
        if entries and is_good(entries[-1]):
            log.info("alertd: resuming from %s (step %s)", path, entries[-1].get("step"))
            return path
        log.warning(
            "alertd: %s=%s is not a good checkpoint in the ledger of %s: not resumed", RESUME_ENV, path, directory
        )
        return None
    log.warning("alertd: %s=%s: no checkpoint ledger says its weights were finite: not resumed", RESUME_ENV, path)
    return None
