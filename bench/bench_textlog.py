"""Benchmark of the textlog source against its anchor, the shell loop that greps train.log for `nan`.

Run as `python bench/bench_textlog.py`. Writes a 20 MB and a 100 MB `train.log` of the lines trainers
print (`key=value` lines with a logging timestamp, HF Trainer dicts, `key: value` lines), then:

- parses the 20 MB log whole with `TextLogSource.read_new()` (CPU seconds of this process): lines/s
  parsed (the mix, then a 20 MB log of its metric lines alone: the mix's lines without a metric cost alertd
  almost nothing, which flatters it; then a `torchrun --tee` log of the mix, 4 ranks' lines interleaved,
  each behind its `[defaultN]:` prefix), beside a plain `re` loop over the same lines (read the file line by
  line, one `findall` of one pattern for `key=value`, `key: value` and `'key': 'value'`, `float()` of each
  value: the least a Python parser does; median of 3) and `grep -ci nan` over the same file (the shell
  loop's whole work, wall seconds);
- resumes a source at the end of the 100 MB log (from a cursor, as after a restart: the poll path is
  the same as after a first read), appends one line at a time and times a poll (`read_new()`, wall
  clock, median of 51), beside one `grep -ci nan train.log` (what the loop does at each of its polls:
  it reads the whole file again).
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alertd.sources.config import TextLogConfig
from alertd.sources.textlog import TextLogSource

PLAIN = re.compile(
    r"""['"]?([A-Za-z_][\w./-]*)['"]?\s*[=:]\s*['"]?([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"""
)
PARSE_SIZE = 20 << 20
TAIL_SIZE = 100 << 20


def line(i: int) -> str:
    """One line of a realistic mix."""
    kind = i % 4
    if kind == 0:
        return f"2024-05-01 12:{i // 60000 % 60:02d}:{i // 1000 % 60:02d},{i % 1000:03d} INFO step={i} loss={2.0 + (i % 97) / 100:.4f} lr=3e-4 grad_norm={1.0 + (i % 13) / 10:.3f}\n"  # noqa: E501
    if kind == 1:
        return f"{{'loss': '{2.0 + (i % 89) / 100:.4g}', 'grad_norm': '{1.1:.4g}', 'learning_rate': '3e-05', 'epoch': '{i / 1e5:.3g}'}}\n"  # noqa: E501
    if kind == 2:
        return f"Step: {i} | loss: {2.5:.4f} | tokens_per_sec: {41000 + i % 500}\n"
    return f"[rank0] iteration {i}: data loader took 0.0{i % 9}s\n"


def build(path: Path, size: int, metrics_only: bool = False) -> int:
    """Write about `size` bytes of log (`metrics_only`: without the mix's lines that hold no metric); return the
    number of lines."""
    n = written = 0
    with open(path, "w") as f:
        while written < size:
            chunk = "".join(line(n + k) for k in range(10000) if not metrics_only or (n + k) % 4 != 3)
            f.write(chunk)
            written += len(chunk)
            n += 10000
    return n


def plain_re(path: Path) -> tuple[float, int]:
    """CPU seconds of the plain `re` loop over the file, and the values it found."""
    c0, found = time.process_time(), 0
    with open(path) as f:
        for text in f:
            for _, value in PLAIN.findall(text):
                float(value)
                found += 1
    return time.process_time() - c0, found


def grep_seconds(path: Path) -> float:
    """Wall seconds of one `grep -ci nan FILE` (the shell loop's work at each of its polls)."""
    t0 = time.perf_counter()
    subprocess.run(["grep", "-ci", "nan", str(path)], stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def beside_plain(what: str, path: Path, lines: int) -> None:
    """Print the parse of `path` (`lines` lines; CPU seconds) beside the plain loop's over the same lines."""
    src = TextLogSource(TextLogConfig(type="textlog", name="bench", path=str(path)))
    c0 = time.process_time()
    src.read_new(time.time())
    parse_s = time.process_time() - c0
    plain_s = statistics.median(plain_re(path)[0] for _ in range(3))
    print(
        f"textlog parse, {what}: {lines / parse_s:.0f} lines/s ({lines} lines); the plain re loop: "
        f"{lines / plain_s:.0f} lines/s (alertd/plain {plain_s / parse_s:.2f}x the speed, goal >= 1)"
    )


def metric_lines(path: Path) -> None:
    """The parse beside the plain loop over the mix's metric lines alone: one line in four of the mix holds no
    metric, and alertd drops those before any regex, which flatters it; this is the fairer figure."""
    beside_plain("metric lines only", path, build(path, PARSE_SIZE, metrics_only=True))


def torchrun_lines(path: Path) -> None:
    """The parse of a `torchrun --tee 3` log (every line behind its rank's `[defaultN]:` prefix, 4 ranks
    interleaved: each rank has its own state and series) beside the plain loop over the same lines."""
    lines = 0
    with open(path, "w") as f:
        while f.tell() < PARSE_SIZE:
            f.write("".join(f"[default{r}]:" + line(lines + r) for r in range(4)))
            lines += 4
    beside_plain("torchrun lines (4 ranks' prefixes, interleaved)", path, lines)


def main() -> None:
    """Print the benchmark lines."""
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        lines = build(path, PARSE_SIZE)
        size_mb = os.path.getsize(path) / 1e6
        src = TextLogSource(TextLogConfig(type="textlog", name="bench", path=str(path)))
        c0 = time.process_time()
        samples = src.read_new(time.time())
        parse_s = time.process_time() - c0
        grep_full = statistics.median(grep_seconds(path) for _ in range(3))
        plains = [plain_re(path) for _ in range(3)]
        plain_s = statistics.median(p[0] for p in plains)
        print(
            f"textlog parse: {lines / parse_s:.0f} lines/s ({lines} lines, {size_mb:.0f} MB, {len(samples)} samples in "
            f"{parse_s:.2f} s CPU); anchor, a plain re loop over the same lines: {lines / plain_s:.0f} lines/s "
            f"({plains[0][1]} values; alertd/plain {plain_s / parse_s:.2f}x the speed, goal >= 1); "
            f"grep -ci nan over the same file: {lines / grep_full:.0f} lines/s "
            f"({grep_full:.3f} s, it finds the word and nothing else)"
        )
        metric_lines(Path(tmp) / "metrics.log")
        torchrun_lines(Path(tmp) / "torchrun.log")
        big = Path(tmp) / "big.log"
        lines = build(big, TAIL_SIZE)
        size_mb = os.path.getsize(big) / 1e6
        src = TextLogSource(TextLogConfig(type="textlog", name="bench", path=str(big)))
        st = big.stat()
        head = big.read_bytes()[:256].hex()
        tail = {"offset": st.st_size, "ident": [st.st_dev, st.st_ino], "head": head}
        src.restore({str(big): {"tail": tail, "parse": {"counter": lines}}})
        polls, greps = [], []
        with open(big, "a") as f:
            for i in range(51):
                f.write(f"step={lines + i} loss=2.0\n")
                f.flush()
                t0 = time.perf_counter()
                got = src.read_new(time.time())
                polls.append(time.perf_counter() - t0)
                assert len(got) == 1, got
                if i < 5:
                    greps.append(grep_seconds(big))
        poll, grep_poll = statistics.median(polls), statistics.median(greps)
        print(
            f"textlog poll after 1 new line on a {size_mb:.0f} MB log: {poll * 1e3:.3f} ms (median of 51; "
            "target < 1 ms); "
            f"anchor grep -ci nan re-reading the file: {grep_poll * 1e3:.1f} ms; ratio {grep_poll / poll:.0f}x"
        )


if __name__ == "__main__":
    main()
