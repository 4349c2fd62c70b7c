"""torchrun's rank prefixes in text logs: taken off, the line's samples labelled `rank`, each rank its own state."""

from __future__ import annotations

from alertd.sources.textlog.parse import FileState, LineParser, split_rank
from alertd.sources.textlog.stream import LogStream

# Real torchrun output (torch 2.13, `torchrun --nproc_per_node=2 --tee 3`), a worker printing `step=N loss=X`:
TEE_DEFAULT = """\
W1204 20:54:39.845000 9388 torch/distributed/run.py:874] *****************************************
[default0]:step=0 loss=2.3
[default1]:step=0 loss=3.3
[default0]:step=1 loss=2.3
[default1]:step=1 loss=3.3
[default1]:to stderr
[default0]:to stderr
"""
# ... and with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'
TEE_RANK = """\
[rank1]:step=0 loss=3.3
[rank1]:step=1 loss=3.3
[rank0]:step=0 loss=2.3
[rank0]:step=1 loss=2.3
"""


def _parse(text: str) -> list[tuple[str, int | None, float, str | None]]:
    stream = LogStream("log", {"source": "tl", "run": "train.log"})
    out: list = []
    stream.parse(LineParser(), text.splitlines(), 100.0, out)
    return [(s.series.metric, s.step, s.value, s.series.label("rank")) for s in out]


def test_split_rank() -> None:
    assert split_rank("[default1]:step=10 loss=2.3") == ("1", "step=10 loss=2.3")
    assert split_rank("[rank3]:x") == ("3", "x")
    assert split_rank("[12]:x") == ("12", "x")
    assert split_rank("[INFO]: x") == (None, "[INFO]: x")
    assert split_rank("[2024-05-01 12:00:00] step=1") == (None, "[2024-05-01 12:00:00] step=1")
    assert split_rank("step=1") == (None, "step=1")


def test_torchrun_tee_default_prefix() -> None:
    assert [g for g in _parse(TEE_DEFAULT) if g[0] == "loss"] == [
        ("loss", 0, 2.3, "0"),
        ("loss", 0, 3.3, "1"),
        ("loss", 1, 2.3, "0"),
        ("loss", 1, 3.3, "1"),
    ]


def test_torchrun_rank_prefix() -> None:
    assert sorted(_parse(TEE_RANK)) == [
        ("loss", 0, 2.3, "0"),
        ("loss", 0, 3.3, "1"),
        ("loss", 1, 2.3, "0"),
        ("loss", 1, 3.3, "1"),
    ]


def test_each_rank_keeps_its_own_counter_and_traceback() -> None:
    text = "[rank0]:loss=1\n[rank1]:loss=2\n[rank0]:loss=1\n[rank1]:Traceback (most recent call last):\n"
    text += '[rank1]:  File "x.py", line 1, in f(step=3)\n[rank0]:loss=1\n[rank1]:RuntimeError: boom\n'
    got = _parse(text)
    assert [g for g in got if g[0] == "loss" and g[3] == "0"] == [("loss", n, 1.0, "0") for n in (1, 2, 3)]
    assert [g for g in got if g[0] == "loss" and g[3] == "1"] == [("loss", 1, 2.0, "1")]
    assert ("run.crashed", None, 1.0, "1") in got  # rank 1's traceback (no step key printed: no step)
    assert not any(g[0] == "run.crashed" and g[3] != "1" for g in got)


def test_rank_states_survive_the_cursor() -> None:
    state = FileState()
    parser = LineParser()
    parser.parse("step=7 loss=1", state.of_rank("2"))  # type: ignore[arg-type]
    back = FileState.from_json(state.to_json())
    assert back.ranks["2"].last_step == 7


def test_unprefixed_lines_carry_no_rank() -> None:
    assert _parse("step=1 loss=2\n") == [("loss", 1, 2.0, None)]
