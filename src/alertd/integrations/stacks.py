"""The stack-dump hook of alertd's trainer callbacks: on alertd's signal, every thread's Python stack is written
to the rank's stacks file, from the C signal handler (`faulthandler`), even while the main thread waits inside a
collective (an `all_reduce` that never returns) or a C call.

The signal is `STACKS_SIGNAL` (SIGRTMIN+6: 40 on Linux with glibc): none that alertd exec forwards to its child
(SIGINT, SIGTERM, SIGUSR1, SIGUSR2...), none that the stop request listens to, and none whose default action a
library in a trainer usually claims. The file is `<output_dir>/alertd-stacks.rank<N>.txt` on rank N of a
distributed run, `<output_dir>/alertd-stacks.txt` in a one-process run; it is opened for appending when
training begins and held open until it ends. alertd's `stacks` action finds it by that name among the rank's open
files (/proc/<pid>/fd) and sends the signal only when the process catches it (/proc/<pid>/status `SigCgt`): a
process without the hook is never sent a signal whose default action would end it. It is sent to the main
thread only (`tgkill`): a signal sent to the process could land in a collective's I/O thread (Gloo's, NCCL's) and
interrupt its blocking call; the main thread's wait in a collective, or in `time.sleep`, is resumed.

Stdlib only: the callbacks import it on every rank."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import re
import signal
from typing import IO

log = logging.getLogger("alertd.integrations")

STACKS_SIGNAL_OFFSET = 6
"""alertd's stack-dump signal is SIGRTMIN + this."""
STACKS_PREFIX = "alertd-stacks"
STACKS_FILE = re.compile(r"alertd-stacks(?:\.rank[0-9]{1,6})?\.txt")
"""The base name of a stacks file (`alertd-stacks.txt`, `alertd-stacks.rank3.txt`)."""


def stacks_signal() -> int:
    """The signal number that asks a rank to dump its stacks (SIGRTMIN+6)."""
    return int(signal.SIGRTMIN) + STACKS_SIGNAL_OFFSET


def stacks_name(rank: str | None) -> str:
    """The stacks file's base name for `rank` (None: a one-process run)."""
    return f"{STACKS_PREFIX}.rank{rank}.txt" if rank is not None else f"{STACKS_PREFIX}.txt"


class StacksHook:
    """`faulthandler.register` on `stacks_signal()` writing to the rank's stacks file, while a run is recorded."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._file: IO[str] | None = None

    def install(self, base_dir: str, rank: str | None) -> None:
        """Hold `<base_dir>/alertd-stacks[.rank<N>].txt` open and dump every thread's stack there on the signal.

        A signal that already has a handler is chained to it (`chain=True`); one with none is not (chaining to
        the default action would end the process). A failure is logged, never raised."""
        self.uninstall()
        if not hasattr(signal, "SIGRTMIN"):
            return
        sig = stacks_signal()
        path = os.path.join(base_dir, stacks_name(rank))
        try:
            previous = signal.getsignal(sig)
            chain = previous not in (signal.SIG_DFL, signal.SIG_IGN)
            f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the C handler until uninstall
            try:
                faulthandler.register(sig, file=f, all_threads=True, chain=chain)
            except BaseException:
                f.close()
                raise
        except (OSError, ValueError, RuntimeError) as e:
            log.warning("alertd: no stack dumps on signal %d (can't hook %s): %s", sig, path, e)
            return
        self.path, self._file = path, f

    def uninstall(self) -> None:
        """Stop dumping on the signal and close the file."""
        if self._file is None:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            faulthandler.unregister(stacks_signal())
        self._file.close()
        self._file, self.path = None, None
