"""Stand-ins for `squeue` and `scancel` as real programs (child processes, as the real ones are), for the unit
tests of what alertd does with their answers. The real Slurm runs in test_slurm_e2e.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SQUEUE = r"""
import json, sys, time
from pathlib import Path
d = Path(sys.argv[0]).parent
with open(d / "calls.log", "a") as f:
    f.write(json.dumps(["squeue", *sys.argv[1:]]) + "\n")
mode = (d / "mode").read_text().strip() if (d / "mode").exists() else ""
if mode == "sleep":
    time.sleep(60)
if mode == "fail":
    print("slurm_load_jobs error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
    sys.exit(1)
if mode == "garbage":
    print("<html>not json</html>")
    sys.exit(0)
if mode == "huge":
    sys.stdout.write("x" * (4 << 20))
    sys.exit(0)
sys.stdout.write((d / "jobs.json").read_text())
"""

SCANCEL = r"""
import json, sys, time
from pathlib import Path
d = Path(sys.argv[0]).parent
with open(d / "calls.log", "a") as f:
    f.write(json.dumps(["scancel", *sys.argv[1:]]) + "\n")
err = (d / "scancel_err").read_text() if (d / "scancel_err").exists() else ""
if err:
    print(err, file=sys.stderr)
elif not any(a.startswith("--signal") for a in sys.argv[1:]):  # a cancel: the job ends CANCELLED, as in Slurm
    doc = json.loads((d / "jobs.json").read_text())
    for j in doc["jobs"]:
        if str(j["job_id"]) == sys.argv[-1] and j["job_state"] in ("RUNNING", "PENDING"):
            j.update(job_state="CANCELLED", exit_code=15, end_time=int(time.time()))
    (d / "jobs.json").write_text(json.dumps(doc))
"""


class FakeSlurm:
    """`squeue` prints `jobs` (the 22.05 shape); `scancel` records its arguments and prints `scancel_err`, or
    (without `--signal`) ends the job CANCELLED."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.squeue = self._program("squeue", SQUEUE)
        self.scancel = self._program("scancel", SCANCEL)
        self.set_jobs([])

    def _program(self, name: str, body: str) -> str:
        path = self.root / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
        return str(path)

    def set_jobs(self, jobs: list[dict[str, Any]]) -> None:
        (self.root / "jobs.json").write_text(json.dumps({"meta": {}, "errors": [], "jobs": jobs}))

    def mode(self, mode: str) -> None:
        (self.root / "mode").write_text(mode)

    def scancel_says(self, text: str) -> None:
        (self.root / "scancel_err").write_text(text)

    def calls(self, program: str | None = None) -> list[list[str]]:
        log = self.root / "calls.log"
        if not log.exists():
            return []
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        return [c[1:] for c in calls if program is None or c[0] == program]


def job(job_id: int, state: str, **extra: Any) -> dict[str, Any]:
    """One job record as Slurm 22.05's `squeue --json` prints it (the fields alertd reads)."""
    record: dict[str, Any] = {
        "job_id": job_id,
        "array_job_id": 0,
        "array_task_id": None,
        "name": f"job{job_id}",
        "user_name": "alice",
        "user_id": 1000,
        "partition": "gpu",
        "job_state": state,
        "state_reason": "None",
        "submit_time": 1_000,
        "start_time": 0 if state == "PENDING" else 1_100,
        "end_time": 1_200 if state not in ("PENDING", "RUNNING") else 0,
        "time_limit": None,
        "exit_code": 0,
        "batch_host": "node1",
        "cluster": "c1",
    }
    record.update(extra)
    return record
