"""The exceptions of alertd.

AlertdError
├── ConfigError        a rules file (or test file) is invalid; carries every problem with its place
├── SourceError        a source could not be read; `recoverable` says whether a later poll may succeed
└── NotifyError        a notification was not delivered; `recoverable` says whether a retry can help,
                       `retry_after` is the receiver's own hint in seconds
"""

from __future__ import annotations

from dataclasses import dataclass


class AlertdError(Exception):
    """Base class of alertd's own errors."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One configuration problem: the file, the place (`rules[3].condition`), the line, the message."""

    file: str
    place: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
        if self.place:
            where += f": {self.place}"
        return f"{where}: {self.message}"


class ConfigError(AlertdError):
    """A rules or test file is invalid. `problems` lists every error found, each with its place."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SourceError(AlertdError):
    """A source failed. `recoverable` is False for errors a retry can't fix (bad credentials)."""

    def __init__(self, message: str, *, recoverable: bool = True) -> None:
        super().__init__(message)
        self.recoverable = recoverable


class NotifyError(AlertdError):
    """A delivery failed. Only the delivery stage retries, and only when `recoverable` is True."""

    def __init__(self, message: str, *, recoverable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.recoverable = recoverable
        self.retry_after = retry_after
