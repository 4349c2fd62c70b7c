"""Webhook formats, one module each, and the registry the webhook notifier picks from by name.

Each format is a pure payload builder, a preparer (signature, URL shape) and a checker that understands
the service's own answers (see `common.Format`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from alertd.notify.formats import (
    dingtalk,
    discord,
    feishu,
    generic,
    mattermost,
    ntfy,
    opsgenie,
    pagerduty,
    pushover,
    slack,
    teams,
    telegram,
    wecom,
)
from alertd.notify.formats.common import Format, Options, Reply, Signed

FORMATS: Mapping[str, Format] = MappingProxyType(
    {
        f.name: f
        for f in (
            generic.FORMAT,
            slack.FORMAT,
            discord.FORMAT,
            teams.FORMAT,
            feishu.FORMAT,
            dingtalk.FORMAT,
            wecom.FORMAT,
            telegram.FORMAT,
            mattermost.FORMAT,
            ntfy.FORMAT,
            pushover.FORMAT,
            pagerduty.FORMAT,
            opsgenie.FORMAT,
        )
    }
)
"""Every webhook format by its name in the rules file (`format: slack`)."""


def get_format(name: str) -> Format:
    """The format called `name`, or KeyError naming the ones there are."""
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown webhook format {name!r}; known: {', '.join(sorted(FORMATS))}") from None


__all__ = ["FORMATS", "Format", "Options", "Reply", "Signed", "get_format"]
