"""`alertd exec`'s restart policy: a crashed or lost child is started again, `max` times at most, `backoff` apart,
never after a user's interrupt, a CUDA OOM or alertd's own stop; a restart resumes from the ledger's newest good
checkpoint. Real alertd processes, real children, real signals."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alertd.integrations.ledger import Ledger
from alertd.integrations.resume import CHECKPOINTS_ENV, RESUME_ENV, resume_from
from alertd.testing.receiver import Receiver

RULES = """
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route: {{receivers: [hook], group_by: [rule, run, attempt], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
  - {{name: run_finished, metric: run.end, labels_match: {{reason: finished}}, condition: "> 0", severity: info}}
exec: {{restart: {{on: [crashed, lost], max: {max}, backoff: {backoff}}}}}
"""
# The child: one line per attempt in `starts` (its attempt, start and end time), then as `plan` says for it.
CHILD = r"""
import json, os, sys, time
starts, plan = sys.argv[1], json.loads(sys.argv[2])
attempt = int(os.environ["ALERTD_ATTEMPT"])
start = time.time()
what = plan[min(attempt, len(plan)) - 1]
print(f"attempt={attempt} step={attempt} loss={'nan' if what == 'nan' else 1.0}", flush=True)
if what == "oom":
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
if what == "kill":  # as the kernel's OOM killer does
    with open(starts, "a") as f:
        f.write(json.dumps([attempt, start, time.time()]) + "\n")
    os.kill(os.getpid(), 9)
if what == "wait":
    import signal
    signal.signal(signal.SIGINT, lambda *a: sys.exit(1))  # a trainer that exits 1 on Ctrl-C: still no restart
    open(starts + ".ready", "w").close()
    time.sleep(60)
with open(starts, "a") as f:
    f.write(json.dumps([attempt, start, time.time()]) + "\n")
sys.exit({"ok": 0, "nan": 1, "oom": 1, "130": 130}.get(what, int(what) if what.isdigit() else 0))
"""


@pytest.fixture
def receiver():  # type: ignore[no-untyped-def]
    r = Receiver()
    yield r
    r.stop()


def alertd_exec(tmp_path: Path, receiver: Receiver, plan: list[str], *flags: str, max: int = 3, backoff: str = "0.2s"):  # type: ignore[no-untyped-def]
    (tmp_path / "rules.yaml").write_text(RULES.format(url=receiver.url, max=max, backoff=backoff))
    (tmp_path / "child.py").write_text(CHILD)
    cmd = [
        sys.executable,
        "-m",
        "alertd",
        "exec",
        "--rules",
        "rules.yaml",
        "--state-dir",
        "state",
        "--run",
        "t",
        *flags,
    ]
    child = [sys.executable, "child.py", str(tmp_path / "starts"), json.dumps(plan)]
    return subprocess.Popen([*cmd, "--", *child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)


def attempts(tmp_path: Path) -> list[list[float]]:
    path = tmp_path / "starts"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fired(receiver: Receiver) -> list[tuple[str, str, dict[str, str]]]:
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [(b["status"], a["labels"]["alertname"], a["labels"]) for b in bodies for a in b["alerts"]]


def test_a_child_that_crashes_twice_is_restarted_twice_and_the_third_attempt_finishes(
    tmp_path: Path, receiver: Receiver
) -> None:
    proc = alertd_exec(tmp_path, receiver, ["nan", "nan", "ok"])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert [a[0] for a in attempts(tmp_path)] == [1, 2, 3]
    assert out.decode().splitlines() == [
        f"attempt={n} step={n} loss={x}" for n, x in ((1, "nan"), (2, "nan"), (3, 1.0))
    ]
    assert err.count(b"crashed (status 1): restart") == 2 and b"not restarted" not in err
    # each attempt is labelled, and its alerts resolve as the next attempt starts (as after a relaunch)
    nans = [(state, labels["attempt"]) for state, name, labels in fired(receiver) if name == "loss_not_finite"]
    assert sorted(nans) == [("firing", "1"), ("firing", "2"), ("resolved", "1"), ("resolved", "2")], nans
    assert [n for s, n, _ in fired(receiver) if s == "firing" and n == "run_finished"] == ["run_finished"]


def test_a_child_that_always_crashes_is_given_up_after_max_with_the_last_status_and_the_backoff_kept(
    tmp_path: Path, receiver: Receiver
) -> None:
    proc = alertd_exec(tmp_path, receiver, ["11", "12", "13", "14"], max=2, backoff="0.5s")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 13, err.decode()[-3000:]
    got = attempts(tmp_path)
    assert [a[0] for a in got] == [1, 2, 3]
    gaps = [nxt[1] - prev[2] for prev, nxt in itertools.pairwise(got)]
    assert min(gaps) >= 0.5, gaps
    assert b"run t crashed (status 13): not restarted: gave up after 2 restarts (restart.max: 2)" in err


def test_a_child_killed_by_a_signal_alertd_did_not_send_is_lost_and_restarted(
    tmp_path: Path, receiver: Receiver
) -> None:
    proc = alertd_exec(tmp_path, receiver, ["kill", "ok"])
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert [a[0] for a in attempts(tmp_path)] == [1, 2]
    assert b"run t lost (status -9): restart 1 of 3, attempt 2 in 200ms" in err


@pytest.mark.parametrize(
    ("plan", "status", "said"),
    [
        (["130"], 130, b"interrupted (status 130): not restarted: a user's interrupt"),
        (["oom"], 1, b"cuda_oom (status 1): not restarted: CUDA out of memory"),
        (["ok"], 0, b""),
    ],
)
def test_never_restarted_after_exit_130_a_cuda_oom_or_a_clean_exit(
    tmp_path: Path, receiver: Receiver, plan: list[str], status: int, said: bytes
) -> None:
    proc = alertd_exec(tmp_path, receiver, [*plan, "ok"])
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err.decode()[-3000:]
    assert [a[0] for a in attempts(tmp_path)] == [1]
    assert said in err and b"restart 1 of" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_forwarded_to_the_child_is_a_user_s_stop_never_restarted(
    tmp_path: Path, receiver: Receiver, sig: signal.Signals
) -> None:
    """The child exits 1 on the forwarded signal (or dies of it): it was asked to stop, it did not crash."""
    proc = alertd_exec(tmp_path, receiver, ["wait", "ok"])
    deadline = time.monotonic() + 30
    while not (tmp_path / "starts.ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (1, 128 + sig), err.decode()[-3000:]
    assert f"forwarding {sig.name}".encode() in err
    assert b"not restarted: a user's interrupt is never restarted" in err and b"restart 1 of" not in err
    assert not attempts(tmp_path) or [a[0] for a in attempts(tmp_path)] == [1]


KILL_RULES = """
notifiers:
  console: {type: log}
  stop: {type: kill, target: child, signals: [SIGTERM], grace: 30s}
route: {receivers: [console], group_by: [rule, run], group_wait: 0s, routes: [{match: {rule: nan}, receivers: [stop]}]}
rules: [{name: nan, metric: ["*loss"], condition: nonfinite, severity: critical}]
exec: {restart: {max: 3, backoff: 0.2s}}
"""


def test_a_child_alertd_stopped_on_a_nan_is_not_restarted(tmp_path: Path) -> None:
    """alertd's kill on a NaN ends the child by SIGTERM (else `lost`, restarted): alertd's own stop, never restarted."""
    (tmp_path / "rules.yaml").write_text(KILL_RULES)
    code = "import time; print('step=1 loss=nan', flush=True); time.sleep(60)"
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "s", "--run", "t", "--"]
    done = subprocess.run([*cmd, sys.executable, "-c", code], capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()[-3000:]
    assert b"run t stopped (status -15): not restarted: alertd stopped it" in done.stderr
    assert done.stdout == b"step=1 loss=nan\n"


def test_flags_override_the_file(tmp_path: Path, receiver: Receiver) -> None:
    proc = alertd_exec(tmp_path, receiver, ["1", "1", "1"], "--max-restarts", "1", "--restart-backoff", "0", max=5)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and [a[0] for a in attempts(tmp_path)] == [1, 2], err.decode()[-3000:]
    proc = alertd_exec(tmp_path, receiver, ["1", "1", "1"], "--restart-on", "lost")
    _, err = proc.communicate(timeout=60)
    assert b"not restarted: restart.on does not name crashed" in err


# Resuming: a plain torch loop that saves with the ledger's own code, crashes once, and resumes.
TORCH_CHILD = r"""
import os, sys
import torch
from alertd.integrations.ledger import Ledger, SCHEDULE
from alertd.integrations.resume import resume_from

out = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ledger = Ledger(out, "torch", write=True)
start, ckpt = 0, resume_from()
if ckpt:
    state = torch.load(os.path.join(ckpt, "state.pt"))
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
    print(f"resumed from {os.path.basename(ckpt)} at step {start}", flush=True)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(start + 1, 41):
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()
    print(f"step={step} loss={loss.item():.4f}", flush=True)
    if step % 10 == 0:
        path = os.path.join(out, f"checkpoint-{step}")
        if step == 30:  # as the callbacks veto a save whose weights are not finite
            ledger.vetoed(step, path, SCHEDULE)
            continue
        os.makedirs(path, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, os.path.join(path, "state.pt"))
        ledger.saved(step, path, SCHEDULE)
    if step == 35 and not ckpt:
        raise RuntimeError("the node fell over")
print("done", flush=True)
"""


def test_a_restart_resumes_a_plain_torch_loop_from_the_ledger_s_newest_good_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("notifiers: {console: {type: log}}\nrules: []\n")
    (tmp_path / "train.py").write_text(TORCH_CHILD)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "s", "--max-restarts", "1"]
    cmd += ["--restart-backoff", "0", "--checkpoints", str(out), "--", sys.executable, "train.py", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "resumed from checkpoint-20 at step 20" in lines and lines[-1] == "done"
    first, second = (
        lines[: lines.index("resumed from checkpoint-20 at step 20")],
        lines[lines.index("resumed from checkpoint-20 at step 20") + 1 :],
    )
    assert [line.split()[0] for line in first] == [f"step={n}" for n in range(1, 36)]
    assert [line.split()[0] for line in second[:-1]] == [f"step={n}" for n in range(21, 41)]
    assert second[0] == first[20]  # step 21 again, from checkpoint-20's weights and optimizer: the same loss
    assert f"the next attempt resumes from {out / 'checkpoint-20'} (step 20)" in done.stderr
    assert "RuntimeError: the node fell over" in done.stderr


def test_resume_from_is_the_env_s_checkpoint_only_when_the_ledger_says_it_is_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    ledger = Ledger(out, "hf", write=True)
    for step in (10, 20):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        ledger.saved(step, str(out / f"checkpoint-{step}"), "schedule")
    ledger.vetoed(30, str(out / "checkpoint-30"), "schedule")
    monkeypatch.delenv(CHECKPOINTS_ENV, raising=False)
    monkeypatch.delenv(RESUME_ENV, raising=False)
    assert resume_from() is None  # a first start
    monkeypatch.setenv(RESUME_ENV, str(out / "checkpoint-20"))
    assert resume_from() == str(out / "checkpoint-20")  # the ledger found above the checkpoint
    monkeypatch.setenv(CHECKPOINTS_ENV, str(out))
    assert resume_from() == str(out / "checkpoint-20")
    (out / "checkpoint-30").mkdir()
    monkeypatch.setenv(RESUME_ENV, str(out / "checkpoint-30"))
    assert resume_from() is None  # vetoed: not finite
    monkeypatch.setenv(RESUME_ENV, str(out / "checkpoint-40"))
    assert resume_from() is None  # no such entry
    (out / "checkpoint-10").rmdir()
    monkeypatch.setenv(RESUME_ENV, str(out / "checkpoint-10"))
    assert resume_from() is None  # gone
    os.environ.pop(CHECKPOINTS_ENV)
    monkeypatch.setenv(RESUME_ENV, str(tmp_path / "elsewhere" / "checkpoint-1"))
    assert resume_from() is None  # no ledger at all


def test_a_real_hf_run_that_crashes_once_resumes_from_its_last_checkpoint_and_finishes(tmp_path: Path) -> None:
    """`trainer.train(resume_from_checkpoint=resume_from())`: the crash at step 12 is restarted once, from
    checkpoint-10 (the ledger's newest good one; rotation kept only it), and the run ends at step 20."""
    pytest.importorskip("transformers")
    (tmp_path / "rules.yaml").write_text(
        "notifiers: {console: {type: log}}\nrules: []\nexec: {restart: {backoff: 0s}}\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", "rules.yaml", "--state-dir", "s", "--checkpoints", "out"]
    cmd += ["--", sys.executable, str(Path(__file__).resolve().parent / "hf_restart_child.py"), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith(("resume_from=", "done at"))]
    assert said == ["resume_from=None", f"resume_from={out / 'checkpoint-10'}", "done at step 20"], done.stdout[-3000:]
    assert "RuntimeError: the node fell over at step 12" in done.stderr
    assert done.stderr.count("restart 1 of 3") == 1
    # the resumed attempt trained steps 11 to 20 only (11 of the Trainer's printed logs before the crash at the end
    # of step 12, 10 after), and its step 11 is the first attempt's: the same loss, learning rate and epoch
    lines = done.stdout.splitlines()
    second = lines.index(f"resume_from={out / 'checkpoint-10'}")
    logs = [[line for line in part if line.startswith("{'loss'")] for part in (lines[:second], lines[second:])]
    assert [len(part) for part in logs] == [11, 10], done.stdout[-3000:]
    assert logs[1][0] == logs[0][10]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--restart-on", "crashed,finished"], "--restart-on: finished: give crashed, lost or crashed,lost"),
        (["--restart-backoff", "soon"], "--restart-backoff: expected a duration such as 30s"),
        (["--max-restarts", "-1"], "--max-restarts can't be negative"),
    ],
)
def test_bad_restart_flags_start_nothing(tmp_path: Path, flags: list[str], said: str) -> None:
    marker = tmp_path / "ran"
    cmd = [sys.executable, "-m", "alertd", "exec", *flags, "--", "touch", str(marker)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0 and not marker.exists()
    assert said in done.stderr


def test_a_signal_during_the_backoff_ends_the_run_with_the_last_status(tmp_path: Path, receiver: Receiver) -> None:
    proc = alertd_exec(tmp_path, receiver, ["7", "ok"], backoff="30s")
    assert proc.stderr is not None
    said = b""
    while b"attempt 2 in 30s" not in said:  # the child has ended; alertd waits out its backoff
        line = proc.stderr.readline()
        assert line, said.decode()[-3000:]
        said += line
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, err.decode()[-3000:]
    assert time.monotonic() - sent < 15  # not the 30 s backoff
    assert b"SIGTERM during the backoff: run t not restarted" in err
    assert [a[0] for a in attempts(tmp_path)] == [1]
