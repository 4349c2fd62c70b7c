"""What a file is, in words, for the messages that refuse to read anything but a regular file."""

from __future__ import annotations

import stat


def file_kind(mode: int) -> str:
    """What a file of this `st_mode` is: "a FIFO", "a socket", "a device", "a directory" ..."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"
