"""Hostile rules files: an alias bomb or a huge file is one clear error, at once, never a hang."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from alertd.config import load_config
from alertd.errors import ConfigError
from alertd.yamlfile import MAX_BYTES, parse_yaml

BOMB = "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9) if prev else ','.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def test_the_billion_laughs_bomb_is_refused_by_alertd_check_at_once(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 500
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "alertd", "check", str(bomb)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert f"{bomb}:6: the document expands to more than 100000 values" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 30  # a hang would be hours


def test_anchors_and_aliases_of_a_normal_rules_file_still_work(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "x-common: &common {severity: critical, annotations: {summary: '$${not a var}'}}\n"
        "rules:\n"
        "  - {name: a, metric: loss, condition: nonfinite, <<: *common}\n"
        "  - {name: b, metric: grad_norm, condition: nonfinite, <<: *common}\n"
    )
    with pytest.raises(ConfigError) as err:  # x-common is not a key of the rules file...
        load_config([str(rules)])
    assert "x-common" in str(err.value)
    doc = parse_yaml(rules.read_text(), str(rules), {})  # ...but the aliases themselves load, once expanded
    assert [r["severity"] for r in doc.data["rules"]] == ["critical", "critical"]
    assert doc.data["rules"][1]["annotations"] == {"summary": "${not a var}"}  # `$${` expanded once, not twice


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_BYTES + "\nrules: []\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(big)])
    assert "larger than 1024 KiB" in str(err.value)
