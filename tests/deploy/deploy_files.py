"""Shared helpers of the deploy tests: where the files are and how alertd's CLI reads an invocation."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from alertd.cli import COMMANDS, _parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
UNIT = DEPLOY / "systemd" / "alertd.service"
README = DEPLOY / "README.md"


def load_docs(path: Path) -> list[dict[str, Any]]:
    """Every YAML document of a manifest file (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def job() -> dict[str, Any]:
    """The training Job of deploy/k8s/job.yaml."""
    (doc,) = load_docs(K8S / "job.yaml")
    return doc


def pod_spec() -> dict[str, Any]:
    """The Job's pod spec."""
    spec: dict[str, Any] = job()["spec"]["template"]["spec"]
    return spec


def sidecar() -> dict[str, Any]:
    """The alertd init container (the native sidecar)."""
    (c,) = [c for c in pod_spec()["initContainers"] if c["name"] == "alertd"]
    return c


def trainer() -> dict[str, Any]:
    """The training container."""
    (c,) = [c for c in pod_spec()["containers"] if c["name"] == "trainer"]
    return c


def dockerfile_final_stage() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's last stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    pairs = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]
    last_from = max(i for i, (ins, _) in enumerate(pairs) if ins == "FROM")
    return pairs[last_from:]


def exec_form(instruction: str) -> list[str]:
    """The JSON (exec form) argument list of ENTRYPOINT or CMD in the final stage."""
    (args,) = [a for ins, a in dockerfile_final_stage() if ins == instruction]
    value = json.loads(args)
    assert isinstance(value, list), f"{instruction} must use the exec (JSON) form"
    return [str(v) for v in value]


def unit_values(key: str) -> list[str]:
    """Every value of `key` in the systemd unit (continuation lines are not used in the unit)."""
    out = []
    for line in UNIT.read_text().splitlines():
        if line.startswith(f"{key}="):
            out.append(line.split("=", 1)[1])
    return out


def parse_invocation(argv: list[str]) -> argparse.Namespace:
    """What alertd's own CLI makes of `argv` (argv[0] is the alertd program), as `main` does it."""
    prog, args = argv[0], list(argv[1:])
    assert prog.rsplit("/", 1)[-1] == "alertd", f"{argv} does not run alertd"
    if not args or args[0] not in (*COMMANDS, "-h", "--help", "--version"):
        args.insert(0, "run")
    return _parser().parse_args(args)


def readme_invocations() -> list[list[str]]:
    """The alertd command lines shown in deploy/README.md's code blocks (`alertd ...` or a path to it)."""
    text = README.read_text()
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].rsplit("/", 1)[-1] == "alertd" and "--rules" in words:
                out.append(words)
    return out
