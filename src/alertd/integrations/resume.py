"""Where a restarted run resumes: the checkpoint `alertd exec` chose for it; framework-free.

When `alertd exec` starts a crashed run again (`exec: {restart: ...}`), it looks in the checkpoint ledger
(`alertd.integrations.ledger`) of the directory `checkpoints:` names for the newest checkpoint whose weights were
finite and that still exists, and gives it to the new child in `ALERTD_RESUME_FROM` (and the ledger's directory in
`ALERTD_CHECKPOINTS`). When alertd's `recover` action restarted it, a recovery plan applies
(`alertd.integrations.plan`: `ALERTD_RECOVERY_PLAN` for the attempt `ALERTD_ATTEMPT`, or, given `output_dir`, the
plan file in that ledger directory that was not applied yet): its `checkpoint` comes first. A script changes by one
line:

    from alertd.integrations.resume import resume_from

    trainer.train(resume_from_checkpoint=resume_from())      # Hugging Face Trainer
    trainer.fit(model, ckpt_path=resume_from())              # Lightning

`resume_from()` is None on a first start (training starts from scratch), and whenever the path is gone or the
ledger does not say its weights were finite. The callbacks then apply the plan's LR cut and skipped updates at the
start of training, only if it really resumed at the plan's checkpoint step.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from alertd.integrations.ledger import LEDGER_NAME, is_good, read
from alertd.integrations.plan import ATTEMPT_ENV, PLAN_ENV, RecoveryPlan, current_plan

log = logging.getLogger("alertd.integrations")

RESUME_ENV = "ALERTD_RESUME_FROM"
"""The checkpoint a restarted child resumes from (set by `alertd exec` on a restart)."""
CHECKPOINTS_ENV = "ALERTD_CHECKPOINTS"
"""The directory of the checkpoint ledger (set by `alertd exec` when it knows one)."""
LEDGER_LEVELS = 4
"""Directories above the checkpoint looked at for its ledger when `ALERTD_CHECKPOINTS` is not set (HF:
`<output_dir>/checkpoint-30`; Lightning: `<root>/lightning_logs/version_0/checkpoints/last.ckpt`)."""

__all__ = ["ATTEMPT_ENV", "CHECKPOINTS_ENV", "PLAN_ENV", "RESUME_ENV", "checkpoint_for", "resume_from"]


def resume_from(output_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The checkpoint to resume from: the applying recovery plan's (`ALERTD_RECOVERY_PLAN`; with `output_dir`, also
    the ledger directory's plan file) if its ledger says it is good; else `ALERTD_RESUME_FROM` if it exists and its
    ledger says it was saved with finite weights; else None (start from scratch)."""
    return checkpoint_for(current_plan(output_dir))


def checkpoint_for(plan: RecoveryPlan | None) -> str | None:
    """`resume_from()` for a plan already read: its checkpoint if good, else `ALERTD_RESUME_FROM`'s, else None."""
    if plan is not None and _good(plan.checkpoint, f"the recovery plan's checkpoint (attempt {plan.attempt})"):
        return os.path.abspath(plan.checkpoint)
    path = os.environ.get(RESUME_ENV)
    if not path:
        return None
    return os.path.abspath(path) if _good(path, RESUME_ENV) else None


def _good(path: str, what: str) -> bool:
    """Whether the ledger of `path` (`ALERTD_CHECKPOINTS`, else a directory above it) says it is a good checkpoint."""
    path = os.path.abspath(path)
    ledger = os.environ.get(CHECKPOINTS_ENV)
    dirs = [Path(ledger)] if ledger else [p for p in Path(path).parents][:LEDGER_LEVELS]
    for directory in dirs:
        if not (directory / LEDGER_NAME).is_file():
            continue
        entries = [e for e in read(directory) if isinstance(e.get("path"), str) and os.path.abspath(e["path"]) == path]
        if entries and is_good(entries[-1]):
            log.info("alertd: resuming from %s (step %s)", path, entries[-1].get("step"))
            return True
        log.warning("alertd: %s %s is not a good checkpoint in the ledger of %s: not resumed", what, path, directory)
        return False
    log.warning("alertd: %s: no checkpoint ledger says the weights of %s were finite: not resumed", what, path)
    return False
