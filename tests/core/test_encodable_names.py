"""Names UTF-8 can't carry (a file name's bytes that are not UTF-8, a lone surrogate from JSON) are escaped where
labels and series are made, by one rule, and nothing downstream fails on them: fingerprints, the state store's
rows (a cursor keyed by such a file name keeps its bytes), the sources' labels."""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path

from alertd.model import SeriesKey, Transition, TransitionKind, alert_fingerprint, encodable, make_labels
from alertd.persist import Snapshot, StateStore, _series_json, _series_key
from alertd.sources.config import SamplesConfig, TensorBoardConfig
from alertd.sources.samples import SamplesSource
from alertd.sources.tensorboard import TensorBoardSource
from alertd.testing.tbwriter import scalar_record


def test_the_rule_bytes_as_backslash_x_other_lone_surrogates_as_backslash_u_the_rest_kept() -> None:
    assert encodable(os.fsdecode(b"bad\xff")) == "bad\\xff"
    assert encodable(os.fsdecode(b"r\xc3\x28")) == "r\\xc3("  # a cut UTF-8 sequence: each byte that is not UTF-8
    assert encodable("bad\ud800") == "bad\\ud800"
    assert encodable("bad\udfff\ud83d") == "bad\\udfff\\ud83d"
    assert encodable("ok, été 😀 \\xff") == "ok, été 😀 \\xff"  # valid text, backslashes included: unchanged
    for text in ("bad\\xff", "bad\\ud800", "r\\xc3("):
        text.encode("utf-8")


def test_labels_and_metric_names_are_escaped_where_they_are_made() -> None:
    labels = make_labels({"run": os.fsdecode(b"bad\xff"), "x\ud800": "1", "source": "tb", "empty": ""})
    assert labels == (("run", "bad\\xff"), ("source", "tb"), ("x\\ud800", "1"))
    key = SeriesKey("loss\udcff", labels)
    assert key.metric == "loss\\xff" and key == SeriesKey("loss\\xff", labels)
    assert make_labels({"run": "été"}) == (("run", "été"),)  # valid text is kept as it is
    fp = alert_fingerprint("nan", labels, "critical")
    assert len(fp) == 16


def test_a_fingerprint_never_fails_even_on_a_label_made_elsewhere() -> None:
    raw = (("run", "bad\udcff"),)  # not through make_labels: the fingerprint still answers
    t = Transition("nan", TransitionKind.FIRING, 0.0, 1, math.nan, raw, "critical")
    assert len(t.fingerprint) == 16


def test_an_earlier_alertds_stored_series_with_a_lone_surrogate_is_read_back_escaped() -> None:
    stored = _series_json(SeriesKey("loss", (("run", "bad\udcff"),)))  # JSON escapes it: \udcff
    assert _series_key(stored) == SeriesKey("loss", (("run", "bad\\xff"),))


def _commit(store: StateStore, cursors: dict[str, tuple[str, object]]) -> None:
    with store.db:
        store.db.execute("BEGIN")
        store.writer(Snapshot({}, {}, cursors, 0.0, frozenset()))(store.db)
    store.committed()


def test_a_cursor_keyed_by_a_file_name_with_bad_bytes_is_stored_and_read_back_the_same(tmp_path: Path) -> None:
    db = tmp_path / "alertd.db"
    store = StateStore(sqlite3.connect(db, isolation_level=None))
    bad, lone = os.fsdecode(b"bad\xff/events.out.tfevents.1"), "x\ud800"
    files = {bad: [10, 4, 7], "ok/events.out.tfevents.2": [20, 4, 8], lone: [1, 0, 0]}
    _commit(store, {"tb": ("fp", files)})
    _commit(store, {"tb": ("fp", {**files, bad: [30, 4, 7]})})  # a changed position: its row replaced
    again = StateStore(sqlite3.connect(db, isolation_level=None))
    (fp, cursor) = again.load_cursors()["tb"]
    assert fp == "fp" and cursor[bad] == [30, 4, 7] and cursor["ok/events.out.tfevents.2"] == [20, 4, 8]
    assert lone.encode("utf-8", "surrogatepass").decode("utf-8", "surrogateescape") in cursor
    _commit(store, {"tb": ("fp", {"ok/events.out.tfevents.2": [20, 4, 8]})})  # the bad files gone: rows deleted
    assert StateStore(sqlite3.connect(db, isolation_level=None)).load_cursors()["tb"][1] == {
        "ok/events.out.tfevents.2": [20, 4, 8]
    }


def test_a_tensorboard_run_directory_with_bad_bytes_is_labelled_escaped_and_resumed_from_its_cursor(
    tmp_path: Path,
) -> None:
    logdir = os.fsencode(tmp_path / "logs")
    os.makedirs(logdir + b"/bad\xff")
    event = logdir + b"/bad\xff/events.out.tfevents.1700000000.node.1.0"
    with open(event, "wb") as f:
        f.write(scalar_record("loss", 1.0, 0) + scalar_record("loss", math.nan, 1))
    cfg = TensorBoardConfig(name="tb", type="tensorboard", logdir=os.fsdecode(logdir))
    source = TensorBoardSource(cfg)
    samples = source.read_new()
    assert [(s.series.label("run"), s.step) for s in samples] == [("bad\\xff", 0), ("bad\\xff", 1)]
    (claim,) = source.writer_claims()
    assert claim.run == "bad\\xff" and os.fsencode(claim.path) == event  # the run as labelled; the real path
    db = tmp_path / "alertd.db"
    _commit(StateStore(sqlite3.connect(db, isolation_level=None)), {"tb": ("fp", source.cursor())})
    with open(event, "ab") as f:
        f.write(scalar_record("loss", 2.0, 2))
    resumed = TensorBoardSource(cfg)
    resumed.restore(StateStore(sqlite3.connect(db, isolation_level=None)).load_cursors()["tb"][1])
    assert [(s.series.label("run"), s.step) for s in resumed.read_new()] == [("bad\\xff", 2)]  # nothing twice


def test_a_samples_line_with_a_lone_surrogate_gives_escaped_labels_and_metric(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = {"metric": "loss\ud800", "labels": {"run": "bad\udcff", "k\udc80": "v"}, "time": 1.0, "value": "NaN"}
    path.write_text(json.dumps(line) + "\n")
    (sample,) = SamplesSource(SamplesConfig(name="s", type="samples", path=str(path))).read_new()
    assert sample.series.metric == "loss\\ud800"
    assert sample.series.labels == (("k\\x80", "v"), ("run", "bad\\xff"), ("source", "s"))
