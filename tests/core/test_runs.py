"""The run tracker: states, end reasons and the derived series rules see. Pure: time is an argument."""

from __future__ import annotations

from alertd.model import Sample, SeriesKey, make_labels
from alertd.runs.tracker import EndReason, RunState, RunTracker, Writer


def s(metric: str, t: float, step: int | None = None, value: float = 1.0, run: str = "r1", **extra: str) -> Sample:
    return Sample(SeriesKey(metric, make_labels({"source": "src", "run": run, **extra})), t, step, value)


def derived(samples: list[Sample]) -> list[tuple[str, float, float, dict[str, str]]]:
    out = []
    for x in samples:
        labels = x.series.label_dict()
        labels.pop("source"), labels.pop("run")
        out.append((x.series.metric, x.time, x.value, labels))
    return out


def test_a_gap_inside_the_data_is_a_stall_and_moving_again_ends_it() -> None:
    runs = RunTracker(stall_after=60)
    assert runs.observe([s("loss", 0, 0), s("loss", 10, 1)]) == []
    got = runs.observe([s("loss", 200, 2)])
    assert derived(got) == [("run.stalled", 70, 1.0, {}), ("run.stalled", 200, 0.0, {})]
    assert runs.runs[("src", "r1")].state is RunState.RUNNING


def test_a_live_stall_on_the_tick_and_none_once_the_run_ended() -> None:
    runs = RunTracker(stall_after=60)
    runs.observe([s("loss", 0, 5)], now=1)
    assert runs.tick(50) == []
    assert derived(runs.tick(61)) == [("run.stalled", 60, 1.0, {})]
    assert runs.tick(100) == []  # said once
    got = runs.observe([s("run.finished", 120), s("run.crashed", 120, value=0.0)])
    assert derived(got) == [("run.stalled", 120, 0.0, {}), ("run.end", 120, 1.0, {"reason": "finished"})]
    assert runs.tick(1000) == []


def test_w_and_b_s_finished_then_crashed_in_one_batch_is_one_crashed_end() -> None:
    runs = RunTracker()
    got = runs.observe([s("loss", 0, 1), s("run.finished", 5), s("run.crashed", 5)])
    assert derived(got) == [("run.end", 5, 1.0, {"reason": "crashed"})]
    assert runs.runs[("src", "r1")].reason is EndReason.CRASHED


def test_hf_summary_means_finished_and_says_so_for_absent() -> None:
    runs = RunTracker()
    got = runs.observe([s("loss", 0, 19), s("train_runtime", 1, 20, 12.5)])
    assert derived(got) == [("run.end", 1, 1.0, {"reason": "finished"}), ("run.finished", 1, 1.0, {})]


def test_an_exit_status_from_alertd_s_own_child() -> None:
    runs = RunTracker()
    runs.observe([s("loss", 0, 1)])
    assert derived(runs.exited("src", "r1", 1, 5)) == [
        ("run.end", 5, 1.0, {"reason": "crashed", "exit_code": "1"}),
        ("run.finished", 5, 1.0, {}),
    ]
    runs.observe([s("loss", 0, 1, run="r2")])
    assert derived(runs.exited("src", "r2", -9, 6))[0] == ("run.end", 6, 1.0, {"reason": "killed", "exit_code": "-9"})


def test_a_writer_that_vanishes_holding_its_files_is_lost_one_that_closed_them_ended_unknown() -> None:
    # Closing the files and exiting is what a crash does too: "finished" is never said on that alone.
    runs = RunTracker()
    runs.observe([s("loss", 0, 1, run="a"), s("loss", 0, 1, run="b")])
    for run, holding in (("a", True), ("b", False)):
        runs.writer("src", run, Writer("h", 10, True, True, True), 1)
        runs.writer("src", run, Writer("h", 10, True, True, holding), 2)
    assert derived(runs.writer("src", "a", Writer("h", 10, True, False, True), 3))[0][3] == {"reason": "lost"}
    assert derived(runs.writer("src", "b", Writer("h", 10, True, False, False), 3)) == [
        ("run.end", 3, 1.0, {"reason": "unknown"}),
        ("run.finished", 3, 1.0, {}),
    ]
    assert runs.runs[("src", "b")].reason is None


def test_a_run_whose_unverified_writer_is_gone_ends_unknown_and_never_stalls() -> None:
    runs = RunTracker(stall_after=60)
    runs.observe([s("loss", 0, 1)], now=0)
    runs.writer("src", "r1", Writer("h", 10, False, True, False), 1)
    assert derived(runs.tick(61)) == [("run.stalled", 60, 1.0, {})]  # the pid lives: a hung run
    got = runs.writer("src", "r1", Writer("h", 10, False, False, False), 70)
    assert derived(got) == [
        ("run.stalled", 70, 0.0, {}),
        ("run.end", 70, 1.0, {"reason": "unknown"}),
        ("run.finished", 70, 1.0, {}),
    ]
    r = runs.runs[("src", "r1")]
    assert r.state is RunState.ENDED and r.reason is None
    assert runs.tick(1000) == []


def test_a_writer_seen_as_a_zombie_tells_how_it_ended_by_its_status() -> None:
    runs = RunTracker()
    runs.observe([s("loss", 0, 1, run=name) for name in ("ok", "bad", "sig")])
    for name in ("ok", "bad", "sig"):
        runs.writer("src", name, Writer("h", 10, False, True, False), 1)
    ok = runs.writer("src", "ok", Writer("h", 10, False, False, False, exit_status=0), 2)
    bad = runs.writer("src", "bad", Writer("h", 11, False, False, False, exit_status=1), 2)
    sig = runs.writer("src", "sig", Writer("h", 12, False, False, False, exit_status=-9), 2)
    assert derived(ok)[0] == ("run.end", 2, 1.0, {"reason": "finished", "exit_code": "0"})
    assert derived(bad)[0] == ("run.end", 2, 1.0, {"reason": "crashed", "exit_code": "1"})
    assert derived(sig)[0] == ("run.end", 2, 1.0, {"reason": "killed", "exit_code": "-9"})


def test_a_fatal_log_line_then_exit_0_stays_one_crashed_end() -> None:
    # `alertd exec` of a script that prints a CUDA-OOM traceback and exits 0: crashed, once; never finished too.
    runs = RunTracker()
    got = runs.observe([s("loss", 0, 1), s("run.crashed", 1), s("run.finished", 1)])
    assert derived(got) == [("run.end", 1, 1.0, {"reason": "crashed"})]
    assert runs.exited("src", "r1", 0, 2) == []
    r = runs.runs[("src", "r1")]
    assert r.reason is EndReason.CRASHED and r.exit_code == 0


def test_better_evidence_retracts_the_earlier_end() -> None:
    # HF's summary said finished; the exit status 3 says crashed: run.end{finished} back to 0, crashed 1.
    runs = RunTracker()
    runs.observe([s("loss", 0, 19), s("train_runtime", 1, 20, 12.5)])
    assert derived(runs.exited("src", "r1", 3, 2)) == [
        ("run.end", 2, 0.0, {"reason": "finished"}),
        ("run.end", 2, 1.0, {"reason": "crashed", "exit_code": "3"}),
    ]
    # ... and the same end said again (status 0 after the summary) is not a new end.
    runs.observe([s("loss", 0, 19, run="r2"), s("train_runtime", 1, 20, 12.5, run="r2")])
    assert runs.exited("src", "r2", 0, 2) == []


def test_a_relaunch_under_the_same_name_sets_the_end_back_to_0() -> None:
    runs = RunTracker()
    runs.observe([s("loss", 0, 1)])
    runs.exited("src", "r1", 1, 5)
    got = runs.observe([s("loss", 10, 1)])
    assert derived(got) == [
        ("run.end", 10, 0.0, {"reason": "crashed", "exit_code": "1"}),
        ("run.finished", 10, 0.0, {}),
    ]
    r = runs.runs[("src", "r1")]
    assert r.state is RunState.RUNNING and r.reason is None and r.exit_code is None


def test_a_started_run_without_an_end_is_lost_at_the_end_of_a_replay() -> None:
    runs = RunTracker()
    runs.observe([s("run.started", 0), s("loss", 5, 1), s("loss", 5, 1, run="plain")])
    assert derived(runs.end_of_replay()) == [("run.end", 5, 1.0, {"reason": "lost"}), ("run.finished", 5, 1.0, {})]


def test_alertd_s_stop_request_makes_the_end_killed_and_new_data_restarts_a_run() -> None:
    runs = RunTracker()
    got = runs.observe([s("loss", 0, 1), s("run.stopped", 1), s("run.finished", 2), s("run.crashed", 2, value=0)])
    assert derived(got)[-1] == ("run.end", 2, 1.0, {"reason": "killed"})
    runs.observe([s("loss", 10, 2)])
    assert runs.runs[("src", "r1")].state is RunState.RUNNING and runs.runs[("src", "r1")].reason is None


def test_history_read_at_start_up_never_stalls() -> None:
    runs = RunTracker(stall_after=60)
    runs.observe([s("loss", 0, 1)], now=10_000)  # a run that ended long before alertd started
    assert runs.tick(10_001) == []
    runs.observe([s("loss", 10_000, 2)], now=10_000)  # it writes again: live
    assert derived(runs.tick(10_060)) == [("run.stalled", 10_060, 1.0, {})]


def test_a_poll_of_100_000_series_is_taken_column_wise_with_the_loop_s_result() -> None:
    """A storm of distinct series in one batch (a CSV header of 100,000 columns): the column-wise path takes
    it (it was quadratic in the series) and leaves each run as the sample-by-sample loop does."""
    keys = [SeriesKey(f"m{i}", make_labels({"source": "src", "run": f"r{i % 3}"})) for i in range(100_000)]
    batch = [Sample(k, 1000.0 + (i % 7), i % 11, 1.0) for i, k in enumerate(keys)]
    batch += [Sample(keys[i], 1010.0, 20 + i, 2.0) for i in range(0, 100_000, 997)]  # some series twice
    fast, slow = RunTracker(stall_after=60), RunTracker(stall_after=60)
    assert fast._observe_progress(batch, 1005.0)  # taken column-wise (it derives nothing: no gap, no marker)
    for sample in batch:  # one at a time: below the column-wise path's threshold
        assert slow.observe([sample], now=1005.0) == []
    assert list(fast.runs) == list(slow.runs) == [("src", "r0"), ("src", "r1"), ("src", "r2")]
    assert list(fast.runs.values()) == list(slow.runs.values())
    assert fast._next_tick == slow._next_tick
    last = max(20 + i for i in range(0, 100_000, 997) if i % 3 == 0)
    assert (fast.runs[("src", "r0")].first_step, fast.runs[("src", "r0")].last_step) == (0, last)
