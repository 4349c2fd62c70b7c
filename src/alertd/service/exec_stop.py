"""The stop `alertd exec` adds to the built-in rules: its child is stopped on a non-finite loss.

Under `alertd exec` alertd owns the trainer, so the built-in rules (no `--rules`) act as well as tell: the
rules in `STOP_RULES` also go to a `kill` notifier with `target: child` that asks first and signals after:

1. it creates the stop file `ALERTD_STOP_FILE` names in the child's environment (alertd's training callbacks
   look for it at every step: they save a checkpoint with finite weights and stop), and waits `ASK_WAIT`;
2. then SIGINT (the callbacks take it as the same request; a plain script gets KeyboardInterrupt), and
   SIGTERM `GRACE` later if the child still runs. Never SIGKILL: a checkpoint being written is not cut.

`alertd exec --no-stop` leaves it out; a rules file of one's own (`--rules`) says itself what acts.
"""

from __future__ import annotations

from dataclasses import replace

from alertd.actions.config import AskFirstConfig, KillConfig
from alertd.config import Config
from alertd.dispatch.route_config import RouteConfig

STOP_RULES = ("loss_not_finite",)
"""The built-in rules whose firing stops the child."""
ASK_WAIT = 10.0
"""Seconds the child has to stop by itself after the stop file appears, before SIGINT."""
GRACE = 300.0
"""Seconds between SIGINT and SIGTERM."""
NOTIFIER = "exec_stop"


def with_exec_stop(config: Config, stop_file: str) -> Config:
    """`config` with the exec stop: a `kill` notifier and a route sending `STOP_RULES` to it (first, and on
    to the routes the rules already had)."""
    name = NOTIFIER
    while name in config.notifiers:
        name = "_" + name
    kill = KillConfig(
        type="kill",
        target="child",
        signals=["SIGINT", "SIGTERM"],
        grace=GRACE,
        ask_first=AskFirstConfig(stop_file=stop_file.replace("{", "{{").replace("}", "}}"), wait=ASK_WAIT),
    )
    stop_route = RouteConfig.model_validate(
        {"match_re": {"rule": "|".join(STOP_RULES)}, "receivers": [name], "continue": True}
    )
    root = config.route.model_copy(update={"routes": [stop_route, *config.route.routes]})
    return replace(config, notifiers={**config.notifiers, name: kill}, route=root)
