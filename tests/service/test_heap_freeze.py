"""The start-up objects are frozen out of the collector's passes once the start-up read is over, and again only
when the buffer doubled and held still."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from alertd.service.heap import GROWTH, HeapFreezer


def test_frozen_once_the_start_up_read_is_over_and_again_when_the_series_double() -> None:
    heap = HeapFreezer()
    try:
        assert not heap.started(False, 100) and not heap.housekeeping(100)  # still reading: nothing frozen
        before = gc.get_freeze_count()
        keep = [[i] for i in range(1000)]  # long-lived objects, tracked by the collector
        assert heap.started(True, 3000) and heap.frozen_at == 3000
        assert gc.get_freeze_count() >= before + len(keep)
        assert not heap.started(True, 3000)  # once
        grown = max(6000, 3000 + GROWTH)
        assert [heap.housekeeping(n) for n in (3000, 5000, 5000, grown - 1, grown - 1, grown)] == [False] * 6
        assert heap.housekeeping(grown) and heap.frozen_at == grown  # doubled and held still
    finally:
        gc.unfreeze()


def test_alertd_run_freezes_its_heap_once_its_sources_were_read(tmp_path: Path) -> None:
    """The real process: once its samples source was read, `alertd run` says it froze its start-up objects, and
    goes on ticking (a NaN written after is still alerted on)."""
    samples = tmp_path / "s.jsonl"
    now = time.time()
    samples.write_text(
        "".join(json.dumps({"metric": "loss", "step": i, "value": 1.0, "time": now}) + "\n" for i in range(50))
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        f"sources: [{{type: samples, name: s, path: '{samples}', interval: 0.2}}]\n"
        "rules: [{name: nan, metric: loss, condition: nonfinite}]\n"
    )
    cmd = [sys.executable, "-m", "alertd", "run", "--rules", str(rules), "--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        [*cmd, "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        lines = _lines_until(proc, "frozen out of the collector", 30.0)
        assert sum("frozen out of the collector" in line for line in lines) == 1
        with samples.open("a") as f:
            f.write(json.dumps({"metric": "loss", "step": 50, "value": "NaN", "time": time.time()}) + "\n")
        fired = _lines_until(proc, "alert nan firing", 30.0)
        assert json.loads(fired[-1])["step"] == 50
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # its pipe read to the end and closed


def _lines_until(proc: subprocess.Popen[str], text: str, timeout: float) -> list[str]:
    """alertd's log lines up to the first whose message holds `text` (fails after `timeout` seconds: the process is
    stopped then, which ends the read)."""
    assert proc.stderr is not None
    timer = threading.Timer(timeout, proc.terminate)
    timer.start()
    seen: list[str] = []
    try:
        lines = iter(proc.stderr.readline, "")
        for line in lines:
            seen.append(line)
            try:
                if text in str(json.loads(line).get("msg", "")):
                    return seen
            except ValueError:
                continue
    finally:
        timer.cancel()
    raise AssertionError(f"no log line saying {text!r}: " + "".join(seen[-20:]))
