"""A dry run reads files under the allowed roots only: a symbolic link inside a root that leads outside
is refused where the source opens it, not only where the request names it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from api_helpers import make_env, serving

from alertd.service import Service
from alertd.testing.tbwriter import ScalarWriter

pytestmark = pytest.mark.anyio
RULES = "rules:\n  - {name: loss_nan, metric: train/loss, condition: nonfinite}\n"


async def test_links_out_of_the_root_are_refused_where_the_source_opens_them(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    writer = ScalarWriter(outside / "secret-run")
    writer.add_scalar("train/loss", 1.0, 0, wall_time=1.7e9)
    writer.add_scalar("train/loss", math.nan, 1, wall_time=1.7e9 + 1)
    writer.close()
    # A run directory inside the root whose event file is a link to the one outside.
    (root / "linked").mkdir(parents=True)
    os.symlink(writer.path, root / "linked" / Path(writer.path).name)
    # The same data in a real file inside the root, which is read.
    real = ScalarWriter(root / "real")
    real.add_scalar("train/loss", math.nan, 1, wall_time=1.7e9)
    real.close()
    # A samples file outside, linked from inside.
    line = {"metric": "train/loss", "labels": {"run": "s"}, "time": 1.7e9, "step": 1, "value": "NaN"}
    (outside / "s.jsonl").write_text(json.dumps(line) + "\n")
    os.symlink(outside / "s.jsonl", root / "s.jsonl")

    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, dry_run_roots=[str(root)]) as client:

        async def dry_run(kind: str, path: str) -> tuple[int, dict[str, object]]:
            body = {"rules": RULES, "source": {"type": kind, "path": path}}
            r = await client.post("/api/v1/dry-run", json=body)
            return r.status_code, r.json()

        status, out = await dry_run("tensorboard", "real")
        assert status == 200 and [t["state"] for t in out["transitions"]] == ["firing"], out  # type: ignore[attr-defined]
        status, out = await dry_run("tensorboard", "linked")
        assert status == 403, out
        (error,) = out["errors"]  # type: ignore[misc]
        assert "outside the allowed directories" in error and "refused" in error, error
        assert "transitions" not in out
        for path in ("s.jsonl", str(root / "s.jsonl")):
            status, out = await dry_run("samples", path)
            assert status == 403 and "outside the allowed directories" in out["errors"][0], out  # type: ignore[index]
        # The whole logdir: the link is refused, though the real run beside it could be read.
        status, out = await dry_run("tensorboard", ".")
        assert status == 403 and "outside the allowed directories" in out["errors"][0], out  # type: ignore[index]
