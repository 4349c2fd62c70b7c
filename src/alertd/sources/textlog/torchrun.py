"""Which rank of a torchrun job failed first, from the launcher's own output. Pure.

When a worker exits non-zero or is killed, torchrun tears the others down and, before it exits 1, prints its
error summary (`ChildFailedError`): the failures, then

    Root Cause (first observed failure):
    [0]:
      time      : 2026-12-04_21:06:35
      host      : localhost
      rank      : 0 (local_rank: 0)
      exitcode  : 1 (pid: 18849)

`FirstFailure` is fed the output's lines (any rank prefix `--tee` adds is tolerated) and keeps the global rank of
the root cause's `rank :` line; failing that summary, the agent's log line `failed (exitcode: 1) local_rank: 0
(pid: ...)` gives the local rank (the global one on a single node). It returns the lines that are the trainer's:
the launcher's own log lines (`W1204 21:06:35.577000 18845 torch/distributed/elastic/...py:1028] ...`) and its
error summary (from `ChildFailedError:` to the summary's closing `====` line) are not, so their numbers
(`exitcode`, `pid`, `local_rank`, a source line) are never taken for the trainer's metrics, nor start an ended
run again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ROOT = re.compile(r"Root Cause \(first observed failure\):")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d{1,7})\b")
_AGENT = re.compile(r"\bfailed \(exitcode: -?\d+\) local_rank: (\d{1,7}) \(pid: \d+\)")
_PREFIX = re.compile(r"^(?:\[[A-Za-z_]*\d{1,7}\]:)+")
_AGENT_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/\S+:\d+\] ")
_RULE = re.compile(r"^={20,}\s*$")
ROOT_LINES = 8
"""Lines after `Root Cause` within which its `rank :` line is looked for."""
SUMMARY_LINES = 100_000
"""Lines of an error summary at most (one with no closing line ends there)."""


class FirstFailure:
    """The rank torchrun says failed first, from the lines fed so far (`rank`; None: not said)."""

    def __init__(self) -> None:
        self.rank: str | None = None
        """The root cause's global rank; else the first failed local rank the agent logged; else None."""
        self._from_root = False
        self._after_root: int | None = None
        self._summary: tuple[int, int] | None = None
        """Inside an error summary: (its lines so far, its `====` lines so far)."""

    def feed(self, lines: Iterable[str]) -> list[str]:
        """Read more of the output; the lines of it that are the trainer's (not the launcher's own)."""
        kept: list[str] = []
        for raw in lines:
            line = _PREFIX.sub("", raw)
            if self._summary is not None:
                count, rules = self._summary
                rules += bool(_RULE.match(line))
                self._summary = None if rules >= 2 or count >= SUMMARY_LINES else (count + 1, rules)
                self._root(line)
                continue
            if "ChildFailedError:" in line:
                self._summary = (0, 0)
                kept.append(raw)  # the exception line: a crash of the launcher, as any traceback's last line
                continue
            if line[:1] in "IWEF" and _AGENT_LOG.match(line):
                if self.rank is None and "failed (exitcode" in line and (m := _AGENT.search(line)) is not None:
                    self.rank = str(int(m.group(1)))
                continue
            kept.append(raw)
        return kept

    def _root(self, line: str) -> None:
        if self._from_root:
            return
        if self._after_root is not None:
            self._after_root += 1
            m = _RANK.match(line)
            if m is not None:
                self.rank, self._from_root = str(int(m.group(1))), True
            elif self._after_root > ROOT_LINES:
                self._after_root = None
        elif "Root Cause" in line and _ROOT.search(line):
            self._after_root = 0
