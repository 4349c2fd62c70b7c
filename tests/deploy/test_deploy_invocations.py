"""One invocation everywhere: the image, the sidecar, the systemd unit and the README, read by alertd's own CLI."""

from __future__ import annotations

import argparse
import shlex

from deploy_files import exec_form, parse_invocation, readme_invocations, sidecar, unit_values


def _image() -> list[str]:
    return exec_form("ENTRYPOINT") + exec_form("CMD")


def _sidecar() -> list[str]:
    side = sidecar()
    return [*side["command"], *side["args"]]


def _unit() -> list[str]:
    (line,) = unit_values("ExecStart")
    return shlex.split(line)


def _options(ns: argparse.Namespace) -> tuple[str, list[str], str, str | None, str]:
    return ns.command, ns.rules, ns.listen, ns.state_dir, ns.log_format


def test_image_sidecar_and_unit_give_alertd_the_same_run_options() -> None:
    image, side, unit = (parse_invocation(argv) for argv in (_image(), _sidecar(), _unit()))
    assert _options(image) == _options(side) == ("run", ["/etc/alertd/rules.yaml"], "0.0.0.0:9090", None, "auto")
    # The bare-metal service listens on loopback only; the rest is the same.
    assert _options(unit) == ("run", ["/etc/alertd/rules.yaml"], "127.0.0.1:9090", None, "auto")


def test_the_readme_shows_these_invocations_and_they_parse() -> None:
    shown = readme_invocations()
    assert shown, "deploy/README.md shows no alertd command line"
    for argv in shown:
        assert parse_invocation(argv).rules  # every command line shown is one alertd accepts
    assert _image() in shown
    assert _unit() in shown
    assert _sidecar() in shown
