"""A real single-node Slurm on this machine for the tests: munged, slurmctld and slurmd from Debian's
`slurm-wlm`, all under one temporary directory, on free ports, stopped after the tests.

Memory is enforced with task/cgroup where the machine has a cgroup v1 memory controller (a job over its
`--mem` then ends OUT_OF_MEMORY, as on a real cluster); elsewhere with jobacct_gather's polling (it ends
FAILED). `SLURM_CONF` in `env` points the commands (sbatch, squeue, scancel) at this cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
NODE = "alertd-node"


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def missing() -> list[str]:
    """The programs of slurm-wlm and munge this machine lacks."""
    return [b for b in BINARIES if _which(b) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cgroup_v1_memory() -> bool:
    return Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() or any(
        Path("/sys/fs/cgroup/memory").glob("*/memory.limit_in_bytes")
    )


class LocalSlurm:
    """The cluster; `sbatch`, `state` and `wait_state` for the tests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.chmod(0o755)  # munged wants its socket's directory reachable
        for d in ("state", "spool", "log", "jobs"):
            (root / d).mkdir()
        self.host = socket.gethostname()
        self.cgroup = _cgroup_v1_memory()
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: list[Path] = []
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._write_conf()

    def _write_conf(self) -> None:
        r = self.root
        plugins = (
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\nJobAcctGatherType=jobacct_gather/cgroup\n"
            if self.cgroup
            else "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/linux\n"
            "JobAcctGatherParams=OverMemoryKill\n"
        )
        self.conf.write_text(
            f"""ClusterName=alertd
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge.sock
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
{plugins}JobAcctGatherFrequency=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=600
KillWait=5
MpiDefault=none
ReturnToService=2
NodeName={NODE} NodeHostname={self.host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        (self.root / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainRAMSpace=yes\n"
            "ConstrainSwapSpace=yes\nConstrainCores=no\nConstrainDevices=no\n"
        )

    def start(self) -> LocalSlurm:
        r = self.root
        subprocess.run(
            [
                _which("munged") or "munged",
                "--force",
                f"--socket={r}/munge.sock",
                f"--key-file={r}/munge.key",
                f"--log-file={r}/log/munged.log",
                f"--pid-file={r}/munged.pid",
                f"--seed-file={r}/munged.seed",
            ],
            check=True,
            env=self.env,
        )
        self._procs.append(r / "munged.pid")
        subprocess.run([_which("slurmctld") or "slurmctld", "-f", str(self.conf), "-i"], check=True, env=self.env)
        self._procs.append(r / "slurmctld.pid")
        subprocess.run([_which("slurmd") or "slurmd", "-f", str(self.conf), "-N", NODE], check=True, env=self.env)
        self._procs.append(r / "slurmd.pid")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            if out.stdout.strip() == "idle":
                return self
            time.sleep(0.3)
        raise AssertionError(f"the local Slurm did not come up:\n{self.logs()}")

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, timeout=30)
        for pidfile in reversed(self._procs):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted((self.root / "log").glob("*.log"))
        )

    def sbatch(self, *args: str) -> str:
        """Submit a job; its id."""
        out = subprocess.run(
            ["sbatch", "--parsable", f"--chdir={self.root / 'jobs'}", *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=True,
        )
        return out.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", job, "-o", "%T"], capture_output=True, text=True, env=self.env
        )
        return out.stdout.strip()

    def wait_state(self, job: str, states: set[str], timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.state(job)
            if state in states:
                return state
            time.sleep(0.2)
        raise AssertionError(f"job {job} is {state!r}, not in {sorted(states)}:\n{self.logs()}")
