"""The two small programs `alertd exec` starts beside its child (run as `python -I -S -c CODE`, stdlib only).

TEE copies the child's stdout and stderr to alertd's own, byte for byte, as they come, and feeds a copy to
alertd to parse. It is a process of its own, so that:

- the copy never waits for the parsing: the child writes at the speed of a plain pipe. When alertd parses
  slower than the child prints, what waits for alertd is kept in memory up to `LIMIT` bytes per stream;
  beyond, the oldest is dropped, except the lines that name a NaN, an Inf or a crash (`KEEP`), which are
  always fed; the drops are told to alertd on the notes pipe (`dropped <stream> <bytes>`);
- the child's output survives alertd: if alertd dies (even by SIGKILL), the copy to the terminal goes on
  until the child (and whatever else holds its output: a background grandchild) closes it, so the child
  never dies of SIGPIPE mid-checkpoint; once alertd stops reading, the feed is dropped and the copy goes on.

It ignores SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGPIPE (it is plumbing: it ends when its
inputs end). Its file descriptors: 0 the child's stdout, 3 the child's stderr, 1 and 2 where they go, 4 the
feed to alertd (both streams framed, in the order they were read: `read_frames`), 6 the notes.

WRAP starts the child itself: it asks the kernel for SIGINT when alertd dies (PR_SET_PDEATHSIG: the polite
stop, which alertd's training callbacks take as a request to save and stop, never a silent hard kill),
checks alertd is still its parent (else it stops at once), then replaces itself with the command (same
pid). A command it can't start exits 127 (not found) or 126, with one line on stderr, as a shell does.
"""

from __future__ import annotations

LIMIT = 16 << 20
"""Bytes per stream waiting for alertd's parsing at most; the oldest are dropped beyond (see the docstring)."""

TEE = r"""
import os, select, signal, time
SMALL, PAUSE = 16384, 0.001
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
LIMIT = @LIMIT@
KEEP = (b"nan", b"NaN", b"NAN", b"inf", b"Inf", b"INF", b"Traceback", b"Error", b"error", b"Killed",
        b"out of memory", b"OutOfMemory")
KEEP_LINES = 256
FEED, NOTES = 4, 6
os.set_blocking(NOTES, False)  # a note alertd does not read in time is lost, never waited for

def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]

def kept(chunk):
    # the lines of a dropped chunk that name a NaN, an Inf or a crash: found with bytes.find (C speed)
    starts = set()
    for word in KEEP:
        at = chunk.find(word)
        while at >= 0 and len(starts) < KEEP_LINES:
            starts.add(chunk.rfind(b"\n", 0, at) + 1)
            end = chunk.find(b"\n", at)
            at = chunk.find(word, end) if end >= 0 else -1
    out = []
    for start in sorted(starts):
        end = chunk.find(b"\n", start)
        out.append(chunk[start:] + b"\n" if end < 0 else chunk[start:end + 1])
    return b"".join(out)

def frame(stream, data):
    return bytes((stream,)) + len(data).to_bytes(4, "big") + data

class Feed:
    # One pipe to alertd, both streams framed (1 byte: 1 stdout, 2 stderr; 4 bytes: length; the bytes), in
    # the order they were read. At most LIMIT bytes wait; beyond, the oldest frames are dropped but for the
    # lines that name a NaN, an Inf or a crash (at most LIMIT bytes of those).
    def __init__(self, fd):
        self.fd = fd
        self.queue, self.size = [], 0
        self.kept, self.kept_size = [], 0  # frames of kept lines (older than the queue)
        self.dropped, self.told = {1: 0, 2: 0}, {1: 0, 2: 0}
        os.set_blocking(fd, False)

    def take(self, stream, data):
        if self.fd is None:
            return
        self.queue.append((stream, data))
        self.size += len(data)
        while self.size > LIMIT and len(self.queue) > 1:
            old_stream, old = self.queue.pop(0)
            self.size -= len(old)
            keep = kept(old) if self.kept_size < LIMIT else b""
            if keep:
                self.kept.append(frame(old_stream, keep))
                self.kept_size += len(keep)
            self.dropped[old_stream] += len(old) - len(keep)

    def pending(self):
        return self.fd is not None and bool(self.kept or self.queue)

    def flush(self, block=False):
        if self.fd is None:
            return
        if block:
            os.set_blocking(self.fd, True)
        while self.kept or self.queue:
            if self.kept:
                head = self.kept[0]
            else:
                stream, data = self.queue[0]
                head = frame(stream, data)
            try:
                n = os.write(self.fd, head)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                self.close()
                return
            if self.kept:
                self.kept_size -= n
                if n == len(head):
                    self.kept.pop(0)
                else:
                    self.kept[0] = head[n:]
            else:
                stream, data = self.queue.pop(0)
                self.size -= len(data)
                if n < len(head):  # the rest of this frame goes first next time, whole
                    self.kept.insert(0, head[n:])
                    self.kept_size += len(head) - n

    def close(self):
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd, self.queue, self.size, self.kept, self.kept_size = None, [], 0, [], 0

    def tell(self):
        for stream, name in ((1, b"stdout"), (2, b"stderr")):
            if self.dropped[stream] != self.told[stream]:
                try:
                    os.write(NOTES, b"dropped " + name + b" " + str(self.dropped[stream]).encode() + b"\n")
                except OSError:
                    pass
                self.told[stream] = self.dropped[stream]

feed = Feed(FEED)
inputs = {0: (1, 1), 3: (2, 2)}  # fd read -> (its stream number, where its bytes go)
out_alive = {1: True, 2: True}
poller = select.poll()
for fd in inputs:
    poller.register(fd, select.POLLIN)
watching_feed = False
while inputs:
    if feed.pending() and not watching_feed:
        poller.register(FEED, select.POLLOUT)
        watching_feed = True
    try:
        events = poller.poll()
    except InterruptedError:
        continue
    for fd, ev in events:
        if fd in inputs:
            stream, dst = inputs[fd]
            try:
                data = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not data:
                poller.unregister(fd)
                del inputs[fd]
                continue
            if out_alive[dst]:
                try:
                    write_all(dst, data)
                except OSError:
                    out_alive[dst] = False  # where it went is gone: the feed goes on
            feed.take(stream, data)
            feed.flush()
            feed.tell()
            if len(data) < SMALL:
                time.sleep(PAUSE)  # a trickle of small writes: let them gather (fewer wake-ups, 1 ms later)
        elif fd == FEED:
            poller.unregister(FEED)
            watching_feed = False
            if ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                feed.close()
            else:
                feed.flush()
try:
    feed.flush(block=True)
except OSError:
    pass
feed.tell()
""".replace("@LIMIT@", str(LIMIT))

WRAP = r"""
import os, signal, sys
parent, argv = int(sys.argv[1]), sys.argv[2:]
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGINT), 0, 0, 0)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != parent:
    os.kill(os.getpid(), signal.SIGINT)  # alertd died before the request stood: the polite stop now
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("alertd exec: can't start %s: %s\n" % (argv[0], exc.strerror or exc))
    sys.stderr.flush()
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


def read_frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """The whole frames at the start of `buf` (removed from it): (stream: 1 stdout, 2 stderr; bytes)."""
    out: list[tuple[int, bytes]] = []
    at = 0
    while len(buf) - at >= 5:
        size = int.from_bytes(buf[at + 1 : at + 5], "big")
        if len(buf) - at - 5 < size:
            break
        out.append((buf[at], bytes(buf[at + 5 : at + 5 + size])))
        at += 5 + size
    del buf[:at]
    return out
