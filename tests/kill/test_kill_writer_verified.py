"""target: writer acts only on a writer verified through the real /proc: real processes, real event files.

Every test here runs real child processes and reads the real /proc; nothing about a process is faked.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kill_helpers import (
    PYTHON,
    Spawner,
    firing,
    nan_labels,
    notification,
    own_pid_alive,
    spawn_with_pid,
    tb_child,
    tb_source,
    wait_for,
)

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier
from alertd.runs.procfs import Procfs
from alertd.runs.writers import (
    BIRTH_TIME,
    HOLDS,
    NAME_TIME,
    OWNER,
    VerifiedWriter,
    WriterClaim,
    WriterRegistry,
    birth_time,
)
from alertd.testing.tbwriter import ScalarWriter

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()
NOT_SEEN = (
    "no writer of run '.' (source 'tb') has been verified (holding one of its event files open, or owning one it "
    "started before): a pid in a file name is not trusted"
)


def kill_cfg(**kw: object) -> KillConfig:
    """A kill config (target writer by default) with short graces."""
    return KillConfig.model_validate({"type": "kill", "grace": 0.3, **kw})


async def kill_once(cfg: KillConfig, labels: dict[str, str], registry: WriterRegistry | None) -> KillNotifier:
    """Send one firing alert with `labels` through a notifier that looks writers up in `registry`."""
    notifier = KillNotifier("stop", cfg, writers=registry.writer if registry else None)
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()
    return notifier


def innocent(spawner: Spawner, marker: str, *extra: str) -> int:
    """A sleeping process of our own user whose command line carries `marker`; returns its pid."""
    p = spawner.popen([PYTHON, "-c", "import sys, time; time.sleep(30)", marker, *extra])
    wait_for(lambda: marker.encode() in Path(f"/proc/{p.pid}/cmdline").read_bytes(), "the bystander to start")
    return p.pid


def spoof(logdir: Path, host: str, pid: int) -> Path:
    """A real event file (a NaN in it, written by tensorboard's writer) renamed to claim `host` and `pid`.

    The rename comes a little after the last write, as a spoofer's does: the file's inode changed after its
    data (ctime > mtime), so its new name is not taken by ownership."""
    w = ScalarWriter(logdir)
    w.add_scalar("loss", 1.0, 1)
    w.add_scalar("loss", math.nan, 2)
    w.close()
    time.sleep(0.05)  # more than a timestamp tick
    path = logdir / f"events.out.tfevents.{int(time.time())}.{host}.{pid}.0"
    os.rename(w.path, path)
    return path


async def test_spoofed_event_file_naming_an_innocent_process_is_refused(
    spawner: Spawner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file renamed to carry the pid of an innocent process of the same user, plus one NaN: refused.

    The spoofer even keeps the file open for writing itself: only the pid the name claims is checked, and
    that process does not hold it; nor is it taken by ownership, as the file was renamed after its last
    write. The innocent process lives on and its command line is named nowhere. (A file *written* under
    that name by the innocent's own uid would name it by ownership: whoever writes as that uid may signal
    its processes anyway.)
    """
    marker = f"innocent-bystander-{os.getpid()}"
    pid = innocent(spawner, marker)
    logdir = tmp_path / "logs"
    path = spoof(logdir, HOST, pid)
    with open(path, "ab"):
        source = tb_source(logdir)
        labels = nan_labels(source)
        assert labels == {"source": "tb", "run": ".", "host": HOST, "pid": str(pid)}
        registry = WriterRegistry()
        (change,) = registry.check(source.writer_claims(), time.time())
        assert registry.writer("tb", ".") is None and registry.writers() == []
        assert change.startswith(f"event file {path} changed after its last write (its inode at ")
        assert change.endswith("renamed?): the pid in its name is not taken by ownership")
        with caplog.at_level(logging.DEBUG):
            notifier = await kill_once(kill_cfg(), labels, registry)
    (report,) = notifier.history
    assert report.refused == NOT_SEEN and report.signals == () and report.cmdline == ""
    assert marker not in report.summary()
    assert not any(marker in r.getMessage() for r in caplog.records)
    time.sleep(0.1)
    assert own_pid_alive(pid)


async def test_an_innocent_reader_of_the_file_is_not_its_writer(spawner: Spawner, tmp_path: Path) -> None:
    """The named process holds the spoofed file open, but only for reading (a `tail -f`): not its writer."""
    logdir = tmp_path / "logs"
    path = spoof(logdir, HOST, 0)
    reader = spawner.popen([PYTHON, "-c", "import sys, time; f = open(sys.argv[1], 'rb'); time.sleep(30)", str(path)])

    def opened() -> bool:
        fds = Path(f"/proc/{reader.pid}/fd")
        return any(os.path.realpath(fd) == str(path) for fd in fds.iterdir())

    wait_for(opened, "the reader to open the file", proc=reader)
    spoofed = path.with_name(f"events.out.tfevents.{int(time.time())}.{HOST}.{reader.pid}.0")
    os.rename(path, spoofed)  # the reader's descriptor follows the file
    source = tb_source(logdir)
    labels = nan_labels(source)
    assert labels["pid"] == str(reader.pid)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    assert registry.writer("tb", ".") is None
    (report,) = (await kill_once(kill_cfg(), labels, registry)).history
    assert report.refused == NOT_SEEN and report.cmdline == ""
    time.sleep(0.1)
    assert reader.poll() is None


async def test_a_pid_label_from_a_samples_line_never_authorizes(spawner: Spawner) -> None:
    """`pid` and `host` labels from any other source (a samples line) name nobody to signal."""
    marker = f"innocent-samples-{os.getpid()}"
    pid = innocent(spawner, marker)
    registry = WriterRegistry()
    labels = {"source": "samples", "run": "r1", "host": HOST, "pid": str(pid)}
    (report,) = (await kill_once(kill_cfg(), labels, registry)).history
    assert report.refused is not None and "a pid in a file name is not trusted" in report.refused
    assert marker not in report.summary()
    (report,) = (await kill_once(kill_cfg(), labels, None)).history
    assert report.refused == "no writer registry: target writer acts only on a writer alertd has verified"
    time.sleep(0.1)
    assert own_pid_alive(pid)


@pytest.mark.parametrize("mode", ["open", "hold"])
async def test_a_verified_writer_is_stopped(spawner: Spawner, tmp_path: Path, mode: str) -> None:
    """A child that holds its own event file open for writing is verified and gets SIGINT; it exits 0.

    `open`: the file written through an open file object (TensorFlow, tensorboardX); `hold`: tensorboard's
    EventFileWriter plus `alertd.runs.writers.hold()`, as alertd's training callback does.
    """
    logdir = tmp_path / "logs"
    proc, ready = tb_child(spawner, logdir, mode)
    source = tb_source(logdir)
    labels = nan_labels(source)
    assert labels["pid"] == str(proc.pid)
    registry = WriterRegistry()
    changes = registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", ".")
    assert w is not None and (w.pid, w.uid, w.host) == (proc.pid, os.getuid(), HOST)
    assert w.holding and w.alive and w.closed_at is None and w.gone_at is None
    assert w.path == ready.read_text()
    info = Procfs().read(proc.pid)
    assert info is not None and w.start_ticks == info.start_ticks
    assert changes == [
        f"run '.' (source 'tb'): pid {proc.pid} verified as the writer of {w.path} (holds it open for writing)"
    ]
    assert registry.check(source.writer_claims(), time.time()) == []  # nothing new

    (report,) = (await kill_once(kill_cfg(grace=5), labels, registry)).history
    assert report.refused is None and [s.name for s in report.signals] == ["SIGINT"]
    assert report.pid == proc.pid and report.exited and report.exit_status == 0
    assert report.program.endswith(" tb_writer_child.py") and report.cmdline == ""
    assert report.verified == f"by holds: it held {w.path} open for writing"
    assert proc.wait(timeout=5) == 0 and Path(f"{ready}.ckpt").exists()
    changes = registry.check(source.writer_claims(), time.time())
    assert changes == [f"run '.' (source 'tb'): writer pid {proc.pid} of {w.path} has exited"]
    gone = registry.writer("tb", ".")
    assert gone is not None and not gone.alive and gone.gone_at is not None and gone.holding


@pytest.mark.parametrize("birth", [True, False])
async def test_a_writer_that_never_holds_its_file_is_verified_by_ownership(
    spawner: Spawner, tmp_path: Path, birth: bool
) -> None:
    """tensorboard's EventFileWriter alone (no TensorFlow: what torch uses) opens the file only to write.

    No process holds the file between flushes; its writer is verified by ownership instead: the file is its
    uid's, and it started before the file was created (the birth time; or, as on a file system without
    one, the second in the name capped by the mtime). It gets SIGINT, and the report says how it was
    verified.
    """
    logdir = tmp_path / "logs"
    proc, ready = tb_child(spawner, logdir, "stub")
    source = tb_source(logdir)
    labels = nan_labels(source)
    assert labels["pid"] == str(proc.pid)
    registry = WriterRegistry(birth_time=birth)
    changes = registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", ".")
    assert w is not None and (w.pid, w.how, w.holding, w.alive) == (proc.pid, OWNER, False, True)
    recorded = birth_time(w.path, os.lstat(w.path)) is not None  # this file system keeps birth times
    how = BIRTH_TIME if birth and recorded else NAME_TIME
    assert w.created_from == how and w.created is not None
    if how == BIRTH_TIME:
        assert abs(w.created - os.stat(w.path).st_mtime) < 30
    else:
        name_secs = int(Path(w.path).name.split(".")[3])
        assert w.created == min(name_secs + 1.0, os.stat(w.path).st_mtime)
    assert changes == [
        f"run '.' (source 'tb'): pid {proc.pid} verified as the writer of {w.path} (owns it and started before "
        f"it was created, by its {how}; not seen holding it)"
    ]
    notifier = await kill_once(kill_cfg(grace=5), labels, registry)
    (report,) = notifier.history
    assert report.refused is None and [s.name for s in report.signals] == ["SIGINT"] and report.exit_status == 0
    assert report.verified.startswith(f"by owner: uid {os.getuid()} owns {w.path}, created at ")
    assert report.verified.endswith(f"({how}) after the process started")
    assert f"; writer verified {report.verified}" in report.summary()
    assert proc.wait(timeout=5) == 0 and Path(f"{ready}.ckpt").exists()


async def test_a_writer_that_closed_its_file_is_still_the_writer_while_it_lives(
    spawner: Spawner, tmp_path: Path
) -> None:
    """Seen holding the file once, then closed it: still the run's writer (same pid and start time)."""
    logdir = tmp_path / "logs"
    proc, ready = tb_child(spawner, logdir, "close")
    source = tb_source(logdir)
    labels = nan_labels(source)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), 1000.0)
    Path(f"{ready}.close").write_text("")
    wait_for(Path(f"{ready}.closed").exists, "the child to close its file", proc=proc)
    changes = registry.check(source.writer_claims(), 1001.0)
    w = registry.writer("tb", ".")
    assert w is not None and w.pid == proc.pid and w.alive and not w.holding and w.closed_at == 1001.0
    assert changes == [f"run '.' (source 'tb'): pid {proc.pid} closed {w.path}; still the run's writer while it lives"]

    (report,) = (await kill_once(kill_cfg(grace=5), labels, registry)).history
    assert report.refused is None and report.exited and report.exit_status == 0
    assert proc.wait(timeout=5) == 0


async def test_an_exited_writer_whose_pid_was_reused_is_refused(spawner: Spawner, tmp_path: Path) -> None:
    """The verified writer exits and its pid goes to a new process: the new process is never signalled.

    Before the registry notices, the notifier's own start-time check refuses; after, the registry says
    the writer exited. Where the kernel won't let the test choose the pid, the pid is simply free.
    """
    logdir = tmp_path / "logs"
    proc, _ = tb_child(spawner, logdir, "open")
    source = tb_source(logdir)
    labels = nan_labels(source)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    assert registry.writer("tb", ".") is not None
    proc.kill()
    proc.wait()
    b = spawn_with_pid(spawner, proc.pid, [PYTHON, "-c", "import time; time.sleep(30)"])
    (report,) = (await kill_once(kill_cfg(), labels, registry)).history
    what = f"the verified writer of run '.' (pid {proc.pid}) has exited: pid {proc.pid}"
    assert report.refused == f"{what} {'now names another process' if b else 'is free'}"
    registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", ".")
    assert w is not None and not w.alive
    (report,) = (await kill_once(kill_cfg(), labels, registry)).history
    assert report.refused == f"the verified writer of run '.' (pid {proc.pid}) has exited"
    if b is not None:
        time.sleep(0.1)
        assert b.poll() is None


async def test_host_names_are_compared_exactly(spawner: Spawner, tmp_path: Path) -> None:
    """`vm.other.example` is not `vm` (nor the other way round), even for a real writer holding its file."""
    other = f"{HOST}.other.example"
    logdir = tmp_path / "logs"
    proc, _ = tb_child(spawner, logdir, "open", host=other)
    source = tb_source(logdir)
    labels = nan_labels(source)
    assert labels["host"] == other and labels["pid"] == str(proc.pid)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    assert registry.writer("tb", ".") is None
    (report,) = (await kill_once(kill_cfg(), labels, registry)).history
    assert report.refused == f"the data comes from host {other!r}, not this machine ({HOST!r})"
    assert report.host == other

    # This machine called by its long name; the file carries the short one.
    logdir2 = tmp_path / "logs2"
    proc2, _ = tb_child(spawner, logdir2, "open")
    source2 = tb_source(logdir2)
    labels2 = nan_labels(source2)
    long_registry = WriterRegistry(hostname=other)
    long_registry.check(source2.writer_claims(), time.time())
    assert long_registry.writer("tb", ".") is None
    notifier = KillNotifier("stop", kill_cfg(), writers=long_registry.writer, hostname=other)
    await notifier.send(notification(firing(labels2)))
    (report,) = notifier.history
    assert report.refused == f"the data comes from host {HOST!r}, not this machine ({other!r})"
    time.sleep(0.1)
    assert proc.poll() is None and proc2.poll() is None


async def test_the_pid_label_must_agree_with_the_verified_writer(spawner: Spawner, tmp_path: Path) -> None:
    """Data from a file named for another pid than the run's verified writer: refused, nobody signalled."""
    logdir = tmp_path / "logs"
    proc, _ = tb_child(spawner, logdir, "open")
    source = tb_source(logdir)
    labels = nan_labels(source)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", ".")
    assert w is not None
    (report,) = (await kill_once(kill_cfg(), {**labels, "pid": "4194000"}, registry)).history
    assert report.refused == (
        f"the data comes from an event file named for pid 4194000, but the verified writer of run '.' is pid "
        f"{proc.pid} ({w.path}): not acting on a process that did not write it"
    )
    (report,) = (await kill_once(kill_cfg(dry_run=True), {"source": "tb", "run": "."}, registry)).history
    assert report.refused is None and report.pid == proc.pid and report.dry_run  # no pid label: the writer
    assert proc.poll() is None


async def test_links_to_a_file_a_process_holds_are_not_its_event_files(spawner: Spawner, tmp_path: Path) -> None:
    """A symbolic or hard link in the logdir to a file that a real writer holds: its writer is not verified.

    Otherwise anyone could point an event-file name at a file some process keeps open (a log) and have
    that process signalled.
    """
    elsewhere, logdir = tmp_path / "elsewhere", tmp_path / "logs"
    logdir.mkdir()
    proc, ready = tb_child(spawner, elsewhere, "open")
    real = Path(ready.read_text())
    (logdir / "sym").mkdir()
    (logdir / "sym" / real.name).symlink_to(real)
    (logdir / "hard").mkdir()
    os.link(real, logdir / "hard" / real.name)
    source = tb_source(logdir)
    source.read_new()
    claims = source.writer_claims()
    assert sorted(c.run for c in claims) == ["hard", "sym"] and {c.pid for c in claims} == {proc.pid}
    registry = WriterRegistry()
    changes = registry.check(claims, time.time())
    assert registry.writers() == []
    never = "its writer is never verified"
    assert sorted(changes) == [
        f"event file {logdir / 'hard' / real.name} has 2 hard links: {never}",
        f"event file {logdir / 'sym' / real.name} is not a regular file (a symbolic link?): {never}",
    ]
    assert registry.check(claims, time.time()) == []  # noted once
    for run in ("sym", "hard"):
        (report,) = (await kill_once(kill_cfg(), {"source": "tb", "run": run, "host": HOST}, registry)).history
        assert report.refused is not None and "a pid in a file name is not trusted" in report.refused
    assert proc.poll() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another uid")
async def test_a_file_of_another_uid_does_not_verify_its_holder(spawner: Spawner, tmp_path: Path) -> None:
    """The process holds the file for writing, but the file belongs to another uid: not verified."""
    logdir = tmp_path / "logs"
    proc, ready = tb_child(spawner, logdir, "open")
    os.chown(ready.read_text(), 65534, 65534)
    source = tb_source(logdir)
    source.read_new()
    registry = WriterRegistry()
    changes = registry.check(source.writer_claims(), time.time())
    assert registry.writers() == []
    assert changes == [
        f"event file {ready.read_text()} belongs to uid 65534 but names pid {proc.pid} of uid 0: not its writer"
    ]


def test_bounded_descriptor_search_and_no_proc(spawner: Spawner, tmp_path: Path) -> None:
    """At most `max_fds` descriptors are looked at; without a /proc nothing is ever verified."""
    logdir = tmp_path / "logs"
    proc, _ = tb_child(spawner, logdir, "open")
    source = tb_source(logdir)
    source.read_new()
    claims = source.writer_claims()
    few = WriterRegistry(max_fds=1)  # it is not seen holding the file: verified by ownership only
    few.check(claims, time.time())
    assert [(w.pid, w.how) for w in few.writers()] == [(proc.pid, OWNER)]
    nowhere = WriterRegistry(procfs=Procfs(tmp_path / "no-proc"))
    assert not nowhere.enabled and nowhere.check(claims, time.time()) == [] and nowhere.writers() == []
    ok = WriterRegistry()
    ok.check(claims, time.time())
    assert [(w.pid, w.how) for w in ok.writers()] == [(proc.pid, HOLDS)]


def test_exited_writers_are_forgotten_and_the_count_is_capped(spawner: Spawner, tmp_path: Path) -> None:
    """An exited writer is forgotten `forget_after` seconds after it was seen gone; at most `max_entries`."""
    a, _ = tb_child(spawner, tmp_path / "logs" / "a", "open")
    b, _ = tb_child(spawner, tmp_path / "logs" / "b", "open")
    source = tb_source(tmp_path / "logs")
    source.read_new()
    claims = source.writer_claims()
    capped = WriterRegistry(max_entries=1)
    changes = capped.check(claims, 100.0)
    assert [w.run for w in capped.writers()] == ["b"] or [w.run for w in capped.writers()] == ["a"]
    assert any("forgot writer" in c for c in changes)

    registry = WriterRegistry(forget_after=60.0)
    registry.check(claims, 100.0)
    assert sorted(w.run for w in registry.writers()) == ["a", "b"]
    a.kill()
    a.wait()
    registry.check(claims, 110.0)
    wa = registry.writer("tb", "a")
    assert wa is not None and not wa.alive and wa.gone_at == 110.0
    registry.check(claims, 169.0)
    assert registry.writer("tb", "a") is not None
    changes = registry.check(claims, 170.0)
    assert registry.writer("tb", "a") is None and [w.run for w in registry.writers()] == ["b"]
    assert changes == [f"run 'a' (source 'tb'): forgot writer pid {a.pid} of {wa.path}"]
    assert b.poll() is None


def test_writer_claims_of_the_tensorboard_source(tmp_path: Path) -> None:
    """Claims come from names with a host and a pid; a tensorboardX-style name (host only) claims nothing."""
    (tmp_path / "r1").mkdir()
    torch_name = tmp_path / "r1" / f"events.out.tfevents.1700000000.{HOST}.4242.0"
    tbx_name = tmp_path / "r1" / "events.out.tfevents.1700000001.somehost"
    for p in (torch_name, tbx_name):
        p.write_bytes(b"")
    source = tb_source(tmp_path)
    assert source.writer_claims() == []  # nothing tailed before the first poll
    source.read_new()
    assert source.writer_claims() == [WriterClaim("tb", "r1", str(torch_name), HOST, 4242)]


def test_newest_living_writer_of_a_run_is_chosen(spawner: Spawner, tmp_path: Path) -> None:
    """Two writers of one run (a restart): the living one is the run's writer, else the newest."""
    logdir = tmp_path / "logs"
    first, _ = tb_child(spawner, logdir, "open")
    source = tb_source(logdir)
    source.read_new()
    registry = WriterRegistry()
    registry.check(source.writer_claims(), 100.0)
    second, _ = tb_child(spawner, logdir, "open")
    source.read_new()
    registry.check(source.writer_claims(), 200.0)
    w = registry.writer("tb", ".")
    assert isinstance(w, VerifiedWriter) and w.pid == second.pid and w.verified_at == 200.0
    second.kill()
    second.wait()
    registry.check(source.writer_claims(), 300.0)
    w = registry.writer("tb", ".")
    assert w is not None and w.pid == first.pid and w.alive


class CountingProcfs(Procfs):
    """The real /proc, counting the reads per pid (what a writer check costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[int, int] = {}

    def read(self, pid: int) -> Any:
        self.reads[pid] = self.reads.get(pid, 0) + 1
        return super().read(pid)


def test_an_idle_logdir_costs_what_changed_in_it(spawner: Spawner, tmp_path: Path) -> None:
    """A finished run's file (its writer's pid gone) and an exited verified writer's are looked at in /proc once,
    not at every check, until their file changes; then once more."""
    import subprocess

    from alertd.service.writers import WriterChecks
    from alertd.testing.tbwriter import scalar_record

    gone = subprocess.Popen(["true"])  # a pid that has exited: a finished run's writer
    gone.wait()
    logdir = tmp_path / "logs"
    (logdir / "finished").mkdir(parents=True)
    finished = logdir / "finished" / f"events.out.tfevents.1700000000.{HOST}.{gone.pid}.0"
    finished.write_bytes(scalar_record("train/loss", 1.0, 0))
    writer, _ = tb_child(spawner, logdir / "exiting", "open")
    source = tb_source(logdir)
    source.read_new()
    procfs = CountingProcfs()
    checks = WriterChecks(lambda name: False, WriterRegistry(procfs=procfs))
    checks._check(source.writer_claims(), 100.0)
    assert (w := checks.registry.writer("tb", "exiting")) is not None and w.alive
    writer.kill()
    writer.wait()
    for now in (110.0, 120.0, 130.0, 140.0):
        checks._check(source.writer_claims(), now)
    w = checks.registry.writer("tb", "exiting")
    assert w is not None and not w.alive and w.gone_at == 110.0
    # the finished run's pid: once, by the cheap rules at the first check (then known gone: not read again)
    assert procfs.reads[gone.pid] == 1
    exited = procfs.reads[writer.pid]
    for now in (150.0, 160.0):
        checks._check(source.writer_claims(), now)
    assert procfs.reads[gone.pid] == 1 and procfs.reads[writer.pid] == exited  # nothing new: no /proc read
    with open(finished, "ab") as f:  # the finished run's file changes: its claim is looked at again, once
        f.write(scalar_record("train/loss", 2.0, 1))
    source.read_new()
    checks._check(source.writer_claims(), 170.0)
    checks._check(source.writer_claims(), 180.0)
    assert procfs.reads[gone.pid] == 2
