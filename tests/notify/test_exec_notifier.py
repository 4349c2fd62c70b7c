"""The exec notifier with real child processes: small Python scripts run via sys.executable."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from notify_helpers import notification, transition

from alertd.config import load_config
from alertd.errors import ConfigError, NotifyError
from alertd.notify.config import ExecConfig
from alertd.notify.exec import OUTPUT_CAP, ExecNotifier
from alertd.notify.formats import Options
from alertd.notify.formats.generic import build as generic_body
from alertd.receivers import build_notifier
from alertd.testing.fds import open_fds

pytestmark = pytest.mark.anyio

SECRET = "tok-very-secret-0042"


def script(tmp_path: Path, code: str, name: str = "hook.py") -> Path:
    path = tmp_path / name
    path.write_text("import json, os, sys, time, signal, subprocess\n" + code)
    return path


def notifier(tmp_path: Path, code: str, **kw: Any) -> ExecNotifier:
    cfg = ExecConfig.model_validate(
        {"type": "exec", "command": [sys.executable, str(script(tmp_path, code)), str(tmp_path)], **kw}
    )
    built = build_notifier("hook", cfg)
    assert isinstance(built, ExecNotifier)
    return built


async def send_error(n: ExecNotifier) -> NotifyError:
    with pytest.raises(NotifyError) as info:
        await n.send(notification())
    return info.value


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


async def test_stdin_is_the_generic_body_and_env_has_the_fields(tmp_path: Path) -> None:
    out = tmp_path / "seen.json"
    n = notifier(
        tmp_path,
        f"env = {{k: v for k, v in os.environ.items() if k.startswith('ALERTD_') or k == 'TOKEN'}}\n"
        f"open({str(out)!r}, 'w').write(json.dumps({{'stdin': sys.stdin.read(), 'env': env}}))\n",
        env={"TOKEN": SECRET},
    )
    note = notification(transition(), transition(run="exp2", state=transition().state, severity="warning"))
    await n.send(note)
    seen = json.loads(out.read_text())
    assert json.loads(seen["stdin"]) == generic_body(note, Options())
    env = seen["env"]
    assert env["TOKEN"] == SECRET
    assert env["ALERTD_STATUS"] == "firing"
    assert env["ALERTD_RULE"] == env["ALERTD_ALERTNAME"] == "loss_not_finite"
    assert env["ALERTD_SEVERITY"] == "critical"  # the first alert in Alertmanager's order (run exp1)
    assert env["ALERTD_RUN"] == "exp1" and env["ALERTD_SOURCE"] == "tb"
    assert env["ALERTD_RECEIVER"] == "chat" and env["ALERTD_NOTIFIER"] == "hook"
    assert env["ALERTD_ALERT_COUNT"] == "2" and env["ALERTD_FIRING_COUNT"] == "2"
    assert env["ALERTD_GROUP_KEY"] == note.group_key and env["ALERTD_KEY"] == note.key
    assert env["ALERTD_SUMMARY"] == "train/loss is NaN at step 250 in exp1"


async def test_alertd_own_environment_does_not_reach_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "alertd-own-secret")
    out = tmp_path / "env.json"
    n = notifier(tmp_path, f"open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    await n.send(notification())
    env = json.loads(out.read_text())
    assert "WANDB_API_KEY" not in env
    assert env["PATH"] == os.environ["PATH"]


async def test_exit_codes(tmp_path: Path) -> None:
    await notifier(tmp_path, "sys.exit(0)\n").send(notification())
    retry = await send_error(notifier(tmp_path, "print('busy', file=sys.stderr); sys.exit(75)\n"))
    assert retry.recoverable and "exit status 75" in str(retry) and "busy" in str(retry)
    custom = await send_error(notifier(tmp_path, "sys.exit(3)\n", retry_codes=[3, 4]))
    assert custom.recoverable
    permanent = await send_error(notifier(tmp_path, "print('bad input', file=sys.stderr); sys.exit(2)\n"))
    assert not permanent.recoverable and "exit status 2" in str(permanent) and "bad input" in str(permanent)
    killed = await send_error(notifier(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)\n"))
    assert not killed.recoverable and "killed by SIGKILL" in str(killed)


async def test_a_program_that_cannot_start_is_a_permanent_failure(tmp_path: Path) -> None:
    cfg = ExecConfig.model_validate({"type": "exec", "command": [str(tmp_path / "missing")]})
    err = await send_error(ExecNotifier("hook", cfg))
    assert not err.recoverable and "cannot start" in str(err)


async def test_secrets_never_in_logs_or_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="alertd")
    code = (
        "t = os.environ['TOKEN']; print('token is', t); print('err', t, file=sys.stderr); sys.exit(int(sys.argv[2]))\n"
    )
    for status in ("0", "1"):
        path = script(tmp_path, code)
        cfg = ExecConfig.model_validate(
            {"type": "exec", "command": [sys.executable, str(path), "x", status], "env": {"TOKEN": SECRET}}
        )
        n = ExecNotifier("hook", cfg)
        if status == "0":
            await n.send(notification())
        else:
            err = await send_error(n)
            assert "err …" in str(err) and SECRET not in str(err)
    assert "token is …" in caplog.text and "err …" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET not in repr(cfg) and SECRET not in str(cfg.model_dump())


async def test_timeout_kills_the_whole_group_grandchild_too(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # the child ignores SIGTERM; its grandchild (same group) sleeps on and holds the output pipes
    code = (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        "time.sleep(300)\n"
    )
    n = notifier(tmp_path, code, timeout="1s", grace="0.5s")
    started = time.monotonic()
    err = await send_error(n)
    took = time.monotonic() - started
    assert err.recoverable and "no exit within 1s" in str(err)
    assert took < 20  # 1s timeout + 0.5s grace + reading the pipes: far from the 300s sleeps
    child, grandchild = (int(p) for p in pids.read_text().split())
    for _ in range(100):
        if gone(child) and gone(grandchild):
            break
        await asyncio.sleep(0.05)
    assert gone(child) and gone(grandchild)


async def test_output_is_capped_and_a_flood_never_blocks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="alertd")
    code = "sys.stdout.write('A' * 2_000_000); sys.stderr.write('B' * 2_000_000); sys.exit(1)\n"
    err = await send_error(notifier(tmp_path, code))
    assert not err.recoverable
    record = next(r for r in caplog.records if "exit status 1" in r.getMessage())
    text = record.getMessage()
    assert text.count("A") == OUTPUT_CAP and text.count("B") == OUTPUT_CAP
    assert len(str(err)) < 1000


async def test_a_program_that_ignores_stdin_and_leaves_a_daemon_is_delivered(tmp_path: Path) -> None:
    # exits 0 at once without reading a large body; a descendant keeps the pipes open for a long time
    pid_file = tmp_path / "daemon"
    code = (
        "d = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(d.pid))\n"
        "sys.exit(0)\n"
    )
    n = notifier(tmp_path, code, timeout="20s")
    many = notification(*(transition(run=f"exp{i}", summary="x" * 500) for i in range(400)))
    fds = open_fds()
    started = time.monotonic()
    try:
        await n.send(many)
        assert time.monotonic() - started < 10  # not the daemon's 30 s, nor the timeout
        assert not gone(int(pid_file.read_text()))  # after a normal exit, descendants are left alone
        # the body the program never read is dropped: no pipe of it stays open while the daemon lives on
        for _ in range(40):
            if open_fds() <= fds:
                break
            await asyncio.sleep(0.05)
        assert open_fds() <= fds, sorted(open_fds() - fds)
    finally:
        os.kill(int(pid_file.read_text()), 9)


async def test_the_event_loop_runs_while_a_program_runs(tmp_path: Path) -> None:
    n = notifier(tmp_path, "time.sleep(1.0)\n")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await n.send(notification())
    ticker.cancel()
    assert ticks >= 5


async def test_aclose_kills_a_running_program(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    n = notifier(tmp_path, f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    sending = asyncio.create_task(n.send(notification()))
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    await n.aclose()
    with pytest.raises(NotifyError) as info:
        await asyncio.wait_for(sending, 20)
    assert "killed by SIGKILL: the notifier was closed" in str(info.value)
    assert info.value.recoverable  # the notification stays in the outbox for the next start
    assert gone(int(pid_file.read_text()))


async def test_a_secret_across_the_output_cap_is_still_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="alertd")
    code = f"sys.stdout.write('A' * ({OUTPUT_CAP} - 5) + os.environ['TOKEN'] + 'B' * 100)\n"
    await notifier(tmp_path, code, env={"TOKEN": SECRET}).send(notification())
    assert "AAAAA…" in caplog.text
    assert SECRET[:5] not in caplog.text


@pytest.mark.parametrize(
    ("entry", "place", "message"),
    [
        ("{type: exec, command: [hook.sh]}", "command", "command[0] must be an absolute path"),
        ("{type: exec, command: []}", "command", "at least 1 item"),
        ("{type: exec, command: [/bin/true], timeout: 0s}", "timeout", "must be more than 0s"),
        ("{type: exec, command: [/bin/true], timeout: soon}", "timeout", ""),
        ("{type: exec, command: [/bin/true], retry_codes: [0]}", "retry_codes[0]", "greater than or equal to 1"),
        ("{type: exec, command: [/bin/true], env: {ALERTD_STATUS: x}}", "env", "set by alertd"),
        ("{type: exec, command: [/bin/true], env: {'A-B': tok-very-secret-0042}}", "env", "not a valid variable"),
    ],
)
def test_config_errors_name_their_place(tmp_path: Path, entry: str, place: str, message: str) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(f"notifiers:\n  hook: {entry}\n")
    with pytest.raises(ConfigError) as info:
        load_config([str(rules)])
    text = str(info.value)
    assert f"notifiers.hook.{place}:" in text, text
    assert message in text
    assert SECRET not in text


def test_a_valid_entry_loads(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "notifiers:\n  hook: {type: exec, command: [/usr/local/bin/page, --team, ml], timeout: 10s, "
        "env: {TOKEN: tok-very-secret-0042}, retry_codes: [75, 69]}\n"
    )
    cfg = load_config([str(rules)]).notifiers["hook"]
    assert isinstance(cfg, ExecConfig)
    assert cfg.command == ["/usr/local/bin/page", "--team", "ml"] and cfg.timeout == 10.0
    assert cfg.retry_codes == [75, 69] and cfg.grace == 5.0
