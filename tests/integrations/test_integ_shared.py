"""The framework-free parts of alertd.integrations: the samples writer, the stop request, the run recorder."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from integ_helpers import markers, read_samples

from alertd.integrations.recorder import RunRecorder
from alertd.integrations.samples_writer import SamplesWriter
from alertd.integrations.stop import StopRequest
from alertd.model import Sample
from alertd.sources.samples import read_samples as alertd_read_samples


def test_samples_writer_writes_what_the_samples_source_reads(tmp_path: Path) -> None:
    """Every line is complete as soon as it is written, and alertd's own parser reads NaN and ±Inf back."""
    path = tmp_path / "deep" / "er" / "s.jsonl"  # directories are created
    writer = SamplesWriter(path, {"run": "r1", "pid": "7"})
    values = [1.5, math.nan, math.inf, -math.inf, 0.0]
    for step, value in enumerate(values):
        writer.write("train/loss", value, step)
    writer.write("run.finished", 1.0, None, {"extra": "x"})
    assert path.read_bytes().count(b"\n") == 6  # flushed, before close
    writer.close()
    writer.write("after", 1.0, 9)  # dropped, not an error
    samples = list(alertd_read_samples(str(path), "src"))
    assert all(isinstance(s, Sample) for s in samples), samples
    got = [(s.series.metric, s.step, s.value, dict(s.series.labels)) for s in samples if isinstance(s, Sample)]
    assert [g[1] for g in got] == [0, 1, 2, 3, 4, None]
    assert got[0][2] == 1.5 and math.isnan(got[1][2]) and got[2][2] == math.inf and got[3][2] == -math.inf
    assert got[0][3] == {"run": "r1", "pid": "7", "source": "src"}
    assert got[5][:3] == ("run.finished", None, 1.0) and got[5][3]["extra"] == "x"
    assert json.loads(path.read_text().splitlines()[1])["value"] == "NaN"


def test_stop_file_request(tmp_path: Path) -> None:
    """Polled by existence; described with the alert's summary; renamed to .done once honoured."""
    stop_file = tmp_path / "ALERTD_STOP"
    request = StopRequest(str(stop_file), signals=())
    assert request.poll() is None
    stop_file.write_text(json.dumps({"rule": "loss_not_finite", "summary": "train/loss is NaN at step 3"}))
    assert request.poll() == "stop_file"
    assert request.describe() == f"stop file {stop_file} (train/loss is NaN at step 3)"
    request.consume()
    assert not stop_file.exists() and (tmp_path / "ALERTD_STOP.done").exists()
    assert request.poll() == "stop_file"  # a request stays made
    bare = tmp_path / "bare"
    bare.touch()  # no body (not made by alertd): just the path
    request = StopRequest(str(bare), ())
    assert request.poll() == "stop_file" and request.describe() == f"stop file {bare}"


def test_signals_are_requests_and_a_second_sigint_interrupts() -> None:
    """SIGUSR1 and the first SIGINT only note a request; the second SIGINT goes to the previous handler
    (Python's: KeyboardInterrupt); uninstall puts the previous handlers back."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    request = StopRequest(None)
    request.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert request.poll() == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGINT)  # a request already stands: it stays SIGUSR1's
        assert request.reason == "SIGUSR1"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == before[signal.SIGINT]
    finally:
        request.uninstall()
    assert {s: signal.getsignal(s) for s in before} == before


def test_someone_elses_sigusr1_handler_is_left_alone() -> None:
    """A SIGUSR1 handler already set (Lightning's SLURM requeue, say) keeps the signal."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        request = StopRequest(None, ("SIGUSR1",))
        request.install()
        os.kill(os.getpid(), signal.SIGUSR1)
        request.uninstall()
        assert seen == [signal.SIGUSR1] and request.poll() is None
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_recorder_paths_from_arguments_environment_and_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A constructor argument wins over ALERTD_*, which wins over the output directory."""
    for name in ("ALERTD_SAMPLES_FILE", "ALERTD_STOP_FILE", "ALERTD_RUN"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "my-run"
    recorder = RunRecorder(None, None, None, signals=())
    recorder.start(out, 0)
    recorder.finish(5)
    samples = read_samples(out / "alertd-samples.jsonl")
    assert {s["labels"]["run"] for s in samples} == {"my-run"}
    assert markers(samples) == [("run.started", 1.0, {}), ("run.crashed", 0.0, {}), ("run.finished", 1.0, {})]
    assert recorder.stop.stop_file == str(out / "ALERTD_STOP")

    monkeypatch.setenv("ALERTD_SAMPLES_FILE", str(tmp_path / "env.jsonl"))
    monkeypatch.setenv("ALERTD_STOP_FILE", str(tmp_path / "env.stop"))
    monkeypatch.setenv("ALERTD_RUN", "env-run")
    recorder = RunRecorder(None, None, None, signals=())
    recorder.start(out, 0)
    recorder.crash("ValueError", 2)
    assert recorder.stop.stop_file == str(tmp_path / "env.stop")
    assert {s["labels"]["run"] for s in read_samples(tmp_path / "env.jsonl")} == {"env-run"}

    recorder = RunRecorder(tmp_path / "arg.jsonl", tmp_path / "arg.stop", "arg-run", signals=())
    recorder.start(out, 0)
    recorder.start(out, 0)  # the first never ended: recorded as a crash of unknown cause
    recorder.finish(1)
    assert recorder.stop.stop_file == str(tmp_path / "arg.stop")
    samples = read_samples(tmp_path / "arg.jsonl")
    assert {s["labels"]["run"] for s in samples} == {"arg-run"}
    assert [m[:2] for m in markers(samples)] == [
        ("run.started", 1.0),
        ("run.crashed", 1.0),
        ("run.finished", 1.0),
        ("run.started", 1.0),
        ("run.crashed", 0.0),
        ("run.finished", 1.0),
    ]
    assert markers(samples)[1][2] == {"exception": "unknown"}


@pytest.mark.parametrize(("ending", "exception"), [("raise ValueError('x')", "ValueError"), ("sys.exit(3)", "unknown")])
def test_a_run_that_never_ends_is_recorded_at_exit(tmp_path: Path, ending: str, exception: str) -> None:
    """An exception that ends the program mid-run is recorded by the atexit handler, with its type."""
    script = textwrap.dedent(
        f"""
        import sys
        from alertd.integrations.recorder import RunRecorder
        recorder = RunRecorder({str(tmp_path / "s.jsonl")!r}, None, "r", signals=())
        recorder.start(".", 0)
        recorder.write("train/loss", 1.0, 7)
        {ending}
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode in (1, 3), result.stderr
    samples = read_samples(tmp_path / "s.jsonl")
    assert markers(samples)[1:] == [("run.crashed", 1.0, {"exception": exception}), ("run.finished", 1.0, {})]
    assert samples[-1]["step"] == 7
