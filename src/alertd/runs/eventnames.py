"""What a TensorBoard event file's name says: `events.out.tfevents.<secs>.<host>[.<pid>.<n>][suffix]`.

Light (no protobuf) so that both the TensorBoard source and `alertd.runs.writers` read names the same way.
A name is a claim only: anyone who can create or rename a file in a logdir chooses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"tfevents\.(?P<time>\d+)(?:\.(?P<rest>.+))?$")
_HOST_PID = re.compile(r"^(?P<host>.+)\.(?P<pid>\d+)\.(?P<uid>\d+)(?P<suffix>\.?[^.\d][^.]*)?$")


def is_event_file(name: str) -> bool:
    """TensorBoard's rule: the base name contains `tfevents` (profiler placeholders excluded)."""
    return "tfevents" in name and not name.endswith(".profile-empty")


@dataclass(frozen=True, slots=True)
class EventFileName:
    """What an event file's name tells: creation second, writer host and pid (None where absent)."""

    time: int | None
    host: str | None
    pid: str | None

    @property
    def sort_key(self) -> int:
        """The creation second, for ordering the files of one run (unknown sorts first)."""
        return self.time if self.time is not None else -1


def parse_file_name(name: str) -> EventFileName:
    """Parse `events.out.tfevents.<secs>.<host>[.<pid>.<n>][suffix]` (torch, TF2, tensorboardX, TF1).

    Host names may hold dots, so pid and counter are taken from the right: the last two all-digit
    fields before an optional suffix (`.v2`, or a torch `filename_suffix`). Without them (tensorboardX,
    TF1) the rest of the name is the host.
    """
    m = _NAME.search(name)
    if m is None:
        return EventFileName(None, None, None)
    secs = int(m["time"])
    rest = m["rest"]
    if not rest:
        return EventFileName(secs, None, None)
    hp = _HOST_PID.match(rest)
    if hp is None:
        return EventFileName(secs, rest, None)
    return EventFileName(secs, hp["host"], hp["pid"])
