"""`target: writer` across two real users: the right process, for the right data (issue 27 items 7 and 9).

alertd's side (the TensorBoard source, the writer registry, the kill notifier) runs in the test, as root
with `allow_other_users` (as alertd would for a lab's shared logdir); everything else is real: the users
`alertd-rela` (whose trainer must be stopped only for its own data) and `alertd-relb` (who spoofs) are
created if missing, and their processes (`sh`, `cat`, `sleep`: the Python here lives under root's home)
run as them, writing their own files into directories of the modes a lab has. Each spoof must be refused
with a reason that names what was wrong, and the trainer must live on.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kill_helpers import Spawner, firing, nan_labels, notification, own_pid_alive, spawn_with_pid, tb_source, wait_for

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier, KillReport
from alertd.runs.writers import BIRTH_TIME, NAME_TIME, OWNER, WriterClaim, WriterRegistry
from alertd.sources.config import SamplesConfig
from alertd.sources.samples import SamplesSource
from alertd.testing.tbwriter import ScalarWriter

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()
TRAINER = 'sleep 0.1; f="$1/events.out.tfevents.$(date +%s).$2.$$.0"; cat > "$f"; exec sleep 60'
"""A trainer: starts, writes its event file (stdin) under its own pid's name, then lives on (as `sleep`)."""


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


@pytest.fixture(scope="module")
def users() -> tuple[User, User]:
    """alertd-rela and alertd-relb, created (useradd) where missing; left in place for the next run."""
    if os.geteuid() != 0:
        pytest.skip("creating users and running processes as them needs root (CI runs as root)")
    out = []
    for name in ("alertd-rela", "alertd-relb"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
            )
            pw = pwd.getpwnam(name)
        out.append(User(name, pw.pw_uid, pw.pw_gid))
    return out[0], out[1]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A logdir the test users can reach (pytest's own tmp dirs are root's alone); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="alertd-two-users-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def mkdir(path: Path, owner: User | None = None, mode: int = 0o755) -> Path:
    """A directory of `owner` (root's by default) with exactly `mode`."""
    path.mkdir()
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)
    path.chmod(mode)
    return path


def as_user(
    spawner: Spawner, user: User, script: str, *args: str, data: bytes | None = None
) -> subprocess.Popen[bytes]:
    """Run `sh -c script sh args...` as `user` (real uid and gid, no extra groups), `data` on its stdin."""
    p = spawner.popen(
        ["/bin/sh", "-c", script, "sh", *args],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
    )
    if data is not None:
        assert p.stdin is not None
        p.stdin.write(data)
        p.stdin.close()
    return p


def events(tmp: Path, *values: float) -> bytes:
    """The bytes of a real event file (tensorboard's writer) holding `loss` = `values` at steps 1, 2, ..."""
    w = ScalarWriter(tmp / f"ev-{time.monotonic_ns()}")
    for step, value in enumerate(values, 1):
        w.add_scalar("loss", value, step)
    w.close()
    return Path(w.path).read_bytes()


def trainer(spawner: Spawner, user: User, run_dir: Path, data: bytes) -> tuple[subprocess.Popen[bytes], Path]:
    """`user`'s trainer writing `data` as its event file in `run_dir`; returns it once it runs on, and its file."""
    p = as_user(spawner, user, TRAINER, str(run_dir), HOST, data=data)
    wait_for(lambda: Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep"), "the trainer to run", proc=p)
    (path,) = run_dir.glob(f"events.out.tfevents.*.{HOST}.{p.pid}.0")
    assert path.stat().st_uid == user.uid and path.stat().st_size == len(data)
    return p, path


def drop(spawner: Spawner, user: User, path: Path, data: bytes) -> Path:
    """`user` writes `data` to `path` (a file of its own), and is done."""
    p = as_user(spawner, user, 'cat > "$1"', str(path), data=data)
    assert p.wait(timeout=10) == 0
    assert path.stat().st_uid == user.uid
    return path


def kill_cfg(**kw: object) -> KillConfig:
    """target writer, as alertd running for a lab would be set up: it may signal its users' processes."""
    return KillConfig.model_validate({"type": "kill", "grace": 5, "allow_other_users": True, **kw})


async def kill(labels: dict[str, str], registry: WriterRegistry) -> KillReport:
    """One firing alert with `labels` through a kill notifier wired to `registry` as the service wires it."""
    notifier = KillNotifier("stop", kill_cfg(), writers=registry.writer, claims=registry.claims)
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()
    (report,) = notifier.history
    return report


def not_verified(run: str, source: str = "tb") -> str:
    """The refusal when a run has no verified writer."""
    return (
        f"no writer of run {run!r} (source {source!r}) has been verified (holding one of its event files open, "
        "or owning one it started before): a pid in a file name is not trusted"
    )


def claims_of(logdir: Path) -> list[WriterClaim]:
    """What the TensorBoard source over `logdir` claims after its first read."""
    source = tb_source(logdir)
    source.read_new()
    claims: list[WriterClaim] = source.writer_claims()
    return claims


def still_running(p: subprocess.Popen[bytes]) -> bool:
    """The trainer got no signal: it is still sleeping."""
    time.sleep(0.1)
    return p.poll() is None and own_pid_alive(p.pid)


async def test_the_users_own_trainer_is_stopped_for_its_own_nan(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """The control: relA's trainer, its own NaN in its own file: verified by ownership, stopped (SIGINT)."""
    rela, _ = users
    run_dir = mkdir(shared / "exp", rela)
    proc, path = trainer(spawner, rela, run_dir, events(tmp_path, 1.0, float("nan")))
    source = tb_source(shared)
    labels = nan_labels(source)
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", "exp")
    assert w is not None and (w.pid, w.uid, w.how) == (proc.pid, rela.uid, OWNER)
    report = await kill(labels, registry)
    assert report.refused is None and [s.name for s in report.signals] == ["SIGINT"]
    assert report.exited and report.exit_status in (-signal.SIGINT, None)  # not always read back under load
    assert report.verified.startswith(f"by owner: uid {rela.uid} owns {path}, created at ")
    assert proc.wait(timeout=5) == -signal.SIGINT


async def test_another_users_file_naming_the_trainers_pid_is_refused(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """relB's own NaN file, in relB's own run, named for relA's trainer: that name verifies nobody."""
    rela, relb = users
    proc, _ = trainer(spawner, rela, mkdir(shared / "a", rela), events(tmp_path, 1.0, 0.9))
    spoof = drop(
        spawner,
        relb,
        mkdir(shared / "b", relb) / f"events.out.tfevents.{int(time.time())}.{HOST}.{proc.pid}.0",
        events(tmp_path, 1.0, float("nan")),
    )
    source = tb_source(shared)
    labels = nan_labels(source)
    assert labels == {"source": "tb", "run": "b", "host": HOST, "pid": str(proc.pid)}
    registry = WriterRegistry()
    changes = registry.check(source.writer_claims(), time.time())
    assert (
        f"event file {spoof} belongs to uid {relb.uid} but names pid {proc.pid} of uid {rela.uid}: not its writer"
        in (changes)
    )
    assert registry.writer("tb", "b") is None
    report = await kill(labels, registry)
    assert report.refused == not_verified("b") and report.signals == ()
    assert still_running(proc)


async def test_a_stale_pid_reused_by_a_later_process_is_refused(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """relA's earlier trainer wrote a NaN and exited; its pid now names relA's next process, which started
    after the file was created: not the file's writer (where the kernel lets the test reuse the pid; else
    the pid is simply free)."""
    rela, _ = users
    run_dir = mkdir(shared / "exp", rela)
    old, path = trainer(spawner, rela, run_dir, events(tmp_path, 1.0, float("nan")))
    old.kill()
    old.wait()
    time.sleep(0.05)
    later = spawn_with_pid(
        spawner, old.pid, ["/bin/sleep", "60"], user=rela.uid, group=rela.gid, extra_groups=[], cwd="/"
    )
    source = tb_source(shared)
    labels = nan_labels(source)
    assert labels["pid"] == str(old.pid)
    registry = WriterRegistry()
    changes = registry.check(source.writer_claims(), time.time())
    assert registry.writer("tb", "exp") is None
    report = await kill(labels, registry)
    assert report.refused == not_verified("exp") and report.signals == ()
    if later is not None:
        (change,) = changes
        assert change.startswith(f"event file {path} names pid {old.pid}, which started at ")
        assert change.endswith(
            (f"its {BIRTH_TIME}): a reused pid, not its writer", f"its {NAME_TIME}): a reused pid, not its writer")
        )
        assert still_running(later)


async def test_a_samples_line_never_speaks_for_the_tensorboard_source(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """Item 9 (a), and a label alone: relB appends lines to a samples file alertd reads, labelled as relA's
    TensorBoard run `victim` (whose directory relB can't write) and naming its trainer's pid. The samples
    source names itself `source` (the line's own is kept as `exported_source`), so the alert is about
    run `victim` of source `samples`, which has no verified writer: refused, the trainer lives."""
    rela, relb = users
    proc, _ = trainer(spawner, rela, mkdir(shared / "victim", rela), events(tmp_path, 1.0, 0.9))
    registry = WriterRegistry()
    registry.check(claims_of(shared), time.time())
    assert registry.writer("tb", "victim") is not None  # relA's real trainer of `victim` is verified
    samples = shared / "samples.jsonl"
    samples.touch()
    samples.chmod(0o666)
    lines = [
        {"labels": {"source": "tb", "run": "victim"}},
        {"labels": {"source": "tb", "run": "victim", "host": HOST, "pid": str(proc.pid)}},
        {"labels": {"run": "victim", "host": HOST, "pid": str(proc.pid)}},  # a label alone
    ]
    text = "".join(
        json.dumps({"metric": "loss", "time": time.time(), "step": 5, "value": "NaN", **x}) + "\n" for x in lines
    )
    appended = as_user(spawner, relb, 'cat >> "$1"', str(samples), data=text.encode())
    assert appended.wait(timeout=10) == 0
    source = SamplesSource(SamplesConfig.model_validate({"name": "samples", "type": "samples", "path": str(samples)}))
    got = [dict(s.series.labels) for s in source.read_new()]
    assert [(g["source"], g.get("exported_source")) for g in got] == [
        ("samples", "tb"),
        ("samples", "tb"),
        ("samples", None),
    ]
    for labels in got:
        report = await kill(labels, registry)
        assert report.refused == not_verified("victim", "samples") and report.signals == ()
    assert still_running(proc)


async def test_another_users_nan_file_in_a_shared_run_directory_is_refused(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """Item 9 (b): relA's trainer writes into a shared (world-writable) run directory and is its verified
    writer; relB drops a NaN file there named for that trainer's pid. The data is not the trainer's own:
    refused, naming relB's file and uid."""
    rela, relb = users
    run_dir = mkdir(shared / "shared", mode=0o1777)
    proc, _ = trainer(spawner, rela, run_dir, events(tmp_path, 1.0, 0.9))
    spoof = drop(
        spawner,
        relb,
        run_dir / f"events.out.tfevents.{int(time.time())}.{HOST}.{proc.pid}.1",
        events(tmp_path, 1.0, float("nan")),
    )
    source = tb_source(shared)
    labels = nan_labels(source)
    assert labels == {"source": "tb", "run": "shared", "host": HOST, "pid": str(proc.pid)}
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", "shared")
    assert w is not None and (w.pid, w.uid) == (proc.pid, rela.uid)
    report = await kill(labels, registry)
    assert report.refused == (
        f"event file {spoof} of the run belongs to uid {relb.uid}, not to uid {rela.uid}: the alert's data may "
        f"come from it, and it is not the verified writer's (pid {proc.pid}, uid {rela.uid}): not acting on the "
        f"verified writer of run 'shared' (pid {proc.pid})"
    )
    assert report.signals == () and report.verified.startswith(f"by owner: uid {rela.uid} owns ")
    assert still_running(proc)


async def test_a_renamed_held_file_and_another_users_nan_file_are_refused(
    spawner: Spawner, tmp_path: Path, shared: Path, users: tuple[User, User]
) -> None:
    """Item 9 (c): in a world-writable directory without the sticky bit, relB renames a file that an
    innocent relA process holds open for writing into `<run>/events.out.tfevents.1.<host>.<pid>.0`: the
    innocent is verified as that file's writer (it holds it). relB's NaN file, also named for that pid, is
    what fired: refused, naming relB's file; the innocent lives."""
    rela, relb = users
    pub = mkdir(shared / "pub", mode=0o777)
    held = pub / "notes.log"
    innocent = as_user(spawner, rela, 'exec 3>>"$1"; exec sleep 60', str(held))
    wait_for(lambda: Path(f"/proc/{innocent.pid}/cmdline").read_bytes().startswith(b"sleep"), "the innocent")
    assert held.stat().st_uid == rela.uid
    run_dir = pub / "run"
    renamed = run_dir / f"events.out.tfevents.1.{HOST}.{innocent.pid}.0"
    nan = run_dir / f"events.out.tfevents.{int(time.time())}.{HOST}.{innocent.pid}.1"
    p = as_user(
        spawner,
        relb,
        'mkdir "$1" && mv "$2" "$3" && cat > "$4"',
        str(run_dir),
        str(held),
        str(renamed),
        str(nan),
        data=events(tmp_path, 1.0, float("nan")),
    )
    assert p.wait(timeout=10) == 0
    source = tb_source(shared)
    labels = nan_labels(source)
    assert labels == {"source": "tb", "run": "pub/run", "host": HOST, "pid": str(innocent.pid)}
    registry = WriterRegistry()
    registry.check(source.writer_claims(), time.time())
    w = registry.writer("tb", "pub/run")
    assert w is not None and (w.pid, w.how, w.path) == (innocent.pid, "holds", str(renamed))
    report = await kill(labels, registry)
    assert report.refused == (
        f"event file {nan} of the run belongs to uid {relb.uid}, not to uid {rela.uid}: the alert's data may "
        f"come from it, and it is not the verified writer's (pid {innocent.pid}, uid {rela.uid}): not acting on "
        f"the verified writer of run 'pub/run' (pid {innocent.pid})"
    )
    assert report.signals == ()
    assert still_running(innocent)
