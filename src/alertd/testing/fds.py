"""What this process holds open, from `/proc` (Linux): for tests that assert a notifier leaves nothing open."""

from __future__ import annotations

import contextlib
import os


def open_fds() -> set[str]:
    """What this process's open file descriptors point at (`pipe:[INODE]`, `socket:[INODE]`, a path)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own descriptor, closed as it is listed
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
    return out


def sockets_to(port: int) -> set[str]:
    """The inodes of this process's TCP sockets whose other end is `port` (a client's side of its connections to
    a server on `port`; the server's own side, should it run in this process, is not among them)."""
    held = {link[8:-1] for link in open_fds() if link.startswith("socket:[")}
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for row in f:
                fields = row.split()  # sl local_address rem_address st ... uid timeout inode
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in held:
                    out.add(fields[9])
    return out
