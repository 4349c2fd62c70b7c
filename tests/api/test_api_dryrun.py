"""POST /api/v1/dry-run: inline samples, sources under allowed roots, limits; it never sends anything."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Receiver, make_env, serving
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.service import Service

pytestmark = pytest.mark.anyio
T0 = 1_717_000_000.0


def dry_rules(hook_port: int, group_wait: str = "30s") -> str:
    """Rules whose route sends to a webhook `pager` (a live receiver that must get nothing)."""
    return f"""\
notifiers:
  pager: {{type: webhook, url: "http://127.0.0.1:{hook_port}/pager"}}
route:
  receivers: [pager]
  group_wait: {group_wait}
rules:
  - name: loss_nan
    metric: train/loss
    condition: nonfinite
    annotations: {{summary: "loss {{{{ value }}}} at {{{{ step }}}}"}}
"""


def samples(values: list[float | str], metric: str = "train/loss") -> list[dict[str, object]]:
    """Inline samples, one second apart from T0."""
    return [
        {"metric": metric, "labels": {"run": "r1"}, "time": T0 + i, "step": i * 10, "value": v}
        for i, v in enumerate(values)
    ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


async def test_inline_samples_give_transitions_and_notifications(tmp_path: Path, receiver: Receiver) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        body = {"rules": dry_rules(receiver.port), "samples": samples([1.0, 0.5, "NaN", 0.4])}
        r = await client.post("/api/v1/dry-run", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        # The same rules as a JSON object, and `until` as RFC 3339.
        import yaml

        as_obj = {**body, "rules": yaml.safe_load(body["rules"]), "until": "2024-05-29T16:30:00Z"}
        r2 = await client.post("/api/v1/dry-run", json=as_obj)
        assert r2.status_code == 200, r2.text
        # The service itself is untouched by a dry run.
        assert (await client.get("/api/v1/alerts")).json()["data"]["alerts"] == []
    assert out["samples"] == 4
    states = [(t["rule"], t["state"], t["step"], t["value"]) for t in out["transitions"]]
    assert states == [("loss_nan", "firing", 20, "NaN"), ("loss_nan", "resolved", 30, 0.4)]
    assert out["transitions"][0]["annotations"] == {"summary": "loss NaN at 20"}
    assert out["transitions"][0]["time"] == "2024-05-29T16:26:42Z"
    # It resolved within group_wait (30s): Alertmanager's dedup sends nothing for it.
    assert out["notifications"] == []
    assert r2.json()["transitions"] == out["transitions"]
    assert receiver.requests == []  # nothing was ever sent


async def test_without_group_wait_firing_and_resolved_are_both_notified(tmp_path: Path, receiver: Receiver) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        body = {"rules": dry_rules(receiver.port, "0s"), "samples": samples([1.0, "NaN", 0.4])}
        out = (await client.post("/api/v1/dry-run", json=body)).json()
    notes = [(n["receiver"], n["status"], n["time"], [a["state"] for a in n["alerts"]]) for n in out["notifications"]]
    assert notes == [
        ("pager", "firing", "2024-05-29T16:26:41Z", ["firing"]),
        ("pager", "resolved", "2024-05-29T16:27:41Z", ["resolved"]),  # at the next group_interval (60s)
    ]
    assert out["notifications"][0]["groupLabels"] == {"rule": "loss_nan", "run": "r1"}  # default group_by
    assert receiver.requests == []


async def test_a_firing_alert_notifies_its_receiver(tmp_path: Path, receiver: Receiver) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        body = {"rules": dry_rules(receiver.port), "samples": samples([1.0, "NaN", "+Inf"])}
        out = (await client.post("/api/v1/dry-run", json=body)).json()
    assert [t["state"] for t in out["transitions"]] == ["firing"]
    (note,) = out["notifications"]
    assert (note["receiver"], note["status"]) == ("pager", "firing")
    assert note["time"] == "2024-05-29T16:27:11Z"  # group_wait (30s) after the firing
    assert [a["value"] for a in note["alerts"]] == ["NaN"]
    assert receiver.requests == []


async def test_bad_rules_and_bad_samples_are_400_with_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    monkeypatch.setenv("ALERTD_API_TEST_SECRET", "very-secret-value-42")
    async with serving(service) as client:
        bad = "rules:\n  - name: x\n    metric: m\n    condition: sometimes\n"
        r = await client.post("/api/v1/dry-run", json={"rules": bad})
        assert r.status_code == 400
        (problem,) = r.json()["errors"]
        assert "rules[0].condition" in problem and "unknown condition" in problem
        r = await client.post("/api/v1/dry-run", json={"rules": "rules: [\n"})
        assert r.status_code == 400 and "invalid YAML" in r.json()["errors"][0]
        leaky = (
            "rules:\n  - {name: x, metric: m, condition: nonfinite, annotations: {a: '${ALERTD_API_TEST_SECRET}'}}\n"
        )
        r = await client.post("/api/v1/dry-run", json={"rules": leaky, "samples": samples(["NaN"], "m")})
        assert r.status_code == 400
        assert "ALERTD_API_TEST_SECRET is not set" in r.text and "very-secret-value-42" not in r.text
        both = leaky + "  - {name: y, metric: m, condition: nonfinit}\n"  # the variable and the typo, in one answer
        errors = (await client.post("/api/v1/dry-run", json={"rules": both})).json()["errors"]
        assert [e.split(": ")[1] for e in errors] == ["rules[0].annotations.a", "rules[1].condition"]
        assert "did you mean 'nonfinite'?" in errors[1]
        good = "rules:\n  - {name: x, metric: m, condition: nonfinite}\n"
        r = await client.post("/api/v1/dry-run", json={"rules": good, "samples": [{"metric": "m", "value": 1}]})
        assert r.status_code == 400 and r.json()["errors"][0].startswith("samples[0]: time must be")
        r = await client.post("/api/v1/dry-run", json={"rules": good, "until": "yesterday"})
        assert r.status_code == 400 and r.json()["errors"][0].startswith("until:")


def write_tb(logdir: Path, values: list[float]) -> None:
    """A TensorBoard event file of `train/loss` scalars."""
    writer = EventFileWriter(str(logdir))
    for i, v in enumerate(values):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="train/loss", simple_value=v)])
        writer.add_event(event_pb2.Event(wall_time=T0 + i, step=i, summary=summary))
    writer.close()


async def test_sources_under_allowed_roots_only(tmp_path: Path, receiver: Receiver) -> None:
    env = make_env(tmp_path)
    root, outside = tmp_path / "allowed", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    write_tb(root / "run1", [1.0, float("nan")])
    lines = [json.dumps(s) for s in samples([1.0, "NaN"])]
    (root / "s.jsonl").write_text("\n".join(lines) + "\n")
    (outside / "s.jsonl").write_text("\n".join(lines) + "\n")
    os.symlink(outside, root / "escape")
    rules = dry_rules(receiver.port)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:

        async def post(kind: str, path: str) -> tuple[int, dict[str, object]]:
            r = await client.post("/api/v1/dry-run", json={"rules": rules, "source": {"type": kind, "path": path}})
            return r.status_code, r.json()

        status, out = await post("tensorboard", str(root / "run1"))
        assert status == 200, out
        assert [(t["state"], t["step"]) for t in out["transitions"]] == [("firing", 1)]  # type: ignore[union-attr]
        status, out = await post("samples", "s.jsonl")  # relative to the root
        assert status == 200 and out["samples"] == 2
        for path in (str(outside / "s.jsonl"), "../outside/s.jsonl", str(root / "escape" / "s.jsonl"), "/etc"):
            status, out = await post("samples", path)
            assert status == 403, path
            assert out["errors"] == ["the path is outside the allowed directories"]
        status, out = await post("samples", "missing.jsonl")
        assert status == 400 and "can't read" in out["errors"][0]  # type: ignore[index]
    service = Service([str(env.rules)], state=env.state)
    async with serving(service) as client:
        r = await client.post("/api/v1/dry-run", json={"rules": rules, "source": {"type": "samples", "path": "/tmp"}})
        assert r.status_code == 403 and "disabled" in r.json()["errors"][0]
    assert receiver.requests == []


async def test_body_size_limit(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, max_body=2000) as client:
        big = {"rules": "rules: []", "samples": samples([1.0] * 100)}
        r = await client.post("/api/v1/dry-run", json=big)
        assert r.status_code == 413 and "2000 bytes" in r.json()["errors"][0]

        async def chunks():  # no Content-Length: the streamed size is what counts
            for _ in range(10):
                yield b" " * 500

        r = await client.post("/api/v1/dry-run", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        small = {"rules": "rules: []", "samples": samples([1.0])}
        assert (await client.post("/api/v1/dry-run", json=small)).status_code == 200


async def test_slow_dry_run_times_out(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, max_body=50_000_000, dry_run_timeout=0.05) as client:
        body = {"rules": dry_rules(9), "samples": samples([1.0, "NaN"] * 20_000)}
        r = await client.post("/api/v1/dry-run", json=body)
        assert r.status_code == 504
        assert "longer than 0.05s" in r.json()["errors"][0]
        assert (await client.get("/healthz")).status_code == 200


async def test_a_text_log_under_an_allowed_root(tmp_path: Path, receiver: Receiver) -> None:
    env = make_env(tmp_path)
    root = tmp_path / "allowed"
    root.mkdir()
    (root / "train.log").write_text("step=10 train/loss=2.5\nstep=20 train/loss=nan\n")
    rules = dry_rules(receiver.port)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:
        body = {"rules": rules, "source": {"type": "textlog", "path": "train.log"}}
        r = await client.post("/api/v1/dry-run", json=body)
        assert r.status_code == 200, r.text
        assert [(t["state"], t["step"], t["labels"]["run"]) for t in r.json()["transitions"]] == [
            ("firing", 20, "train.log")
        ]
        body = {"rules": rules, "source": {"type": "textlog", "path": "*.log"}}
        r = await client.post("/api/v1/dry-run", json=body)
        assert r.status_code == 400 and "no wildcards" in r.json()["errors"][0]
    assert receiver.requests == []


RECOVER_RULES = """\
notifiers:
  back: {type: recover, rollback: 5%s}
route: {receivers: [back]}
rules:
  - {name: loss_nan, metric: train/loss, condition: nonfinite}
"""


async def test_recoveries_say_the_checkpoint_and_the_skipped_updates(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    root, outside = tmp_path / "allowed", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    run = [{**s, "step": i} for i, s in enumerate(samples([1.0] * 40 + ["NaN"] + [1.0] * 5))]
    (root / "s.jsonl").write_text("".join(json.dumps(s) + "\n" for s in run))
    entries = [
        {"step": k, "path": f"/out/checkpoint-{k}", "time": T0 + k, "finite": True, "saved": True} for k in (10, 20, 30)
    ]
    (root / "alertd-checkpoints.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    (outside / "alertd-checkpoints.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:

        async def post(extra: str = "") -> dict[str, Any]:
            body = {"rules": RECOVER_RULES % extra, "source": {"type": "samples", "path": "s.jsonl"}, "plot": True}
            r = await client.post("/api/v1/dry-run", json=body)
            assert r.status_code == 200, r.text
            return dict(r.json())

        out = await post()
        (got,) = out["recoveries"]
        assert (got["notifier"], got["rule"], got["step"], got["run"]) == ("back", "loss_nan", 40, "r1")
        assert (got["refused"], got["give_up"]) == (None, False)
        plan = got["plan"]
        assert (plan["checkpoint"], plan["checkpoint_step"], plan["skip"], plan["lr_factor"]) == (
            "/out/checkpoint-30",
            30,
            [31, 41],
            0.5,
        )
        svg = out["plots"][0]["svg"]
        assert 'class="recovery-checkpoint"' in svg and 'data-from="31" data-to="41"' in svg
        refused = (await post(f", checkpoints: {outside}"))["recoveries"][0]
        assert refused["plan"] is None and "outside the allowed directories" in refused["refused"]
        assert (await post(f", checkpoints: {root}"))["recoveries"][0]["plan"]["checkpoint_step"] == 30
