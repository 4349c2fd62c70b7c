"""Names Prometheus and Alertmanager accept, made from alertd's metric and label names (pure: no I/O).

alertd's names may hold any character (`train/loss`, `gpu.uuid`); Prometheus' are `[a-zA-Z_:][a-zA-Z0-9_:]*`
(metrics) and `[a-zA-Z_][a-zA-Z0-9_]*` (labels, Alertmanager's too). Every other character becomes `_`, and a
name that would start with a digit gets a leading `_`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_BAD_LABEL_CHAR = re.compile(r"[^A-Za-z0-9_]")
_BAD_METRIC_CHAR = re.compile(r"[^A-Za-z0-9_:]")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def label_name(name: str) -> str:
    """A label name Prometheus and Alertmanager accept (`[A-Za-z_][A-Za-z0-9_]*`): other characters become `_`."""
    clean = _BAD_LABEL_CHAR.sub("_", name)
    return clean if clean and not clean[0].isdigit() else "_" + clean


def metric_name(name: str) -> str:
    """A metric name Prometheus accepts (`[a-zA-Z_:][a-zA-Z0-9_:]*`): `train/loss` -> `train_loss`."""
    clean = _BAD_METRIC_CHAR.sub("_", name)
    return clean if clean and not clean[0].isdigit() else "_" + clean


def prom_label_name(name: str) -> str:
    """`label_name`, and not one of the names Prometheus keeps for itself (`__name__`, any `__` prefix):
    those lose their leading underscores but one (`__name__` -> `_name__`)."""
    clean = name if _LABEL.fullmatch(name) else label_name(name)
    if clean.startswith("__"):
        clean = "_" + clean.lstrip("_")
    return clean


def prom_labels(labels: Iterable[tuple[str, str]], cache: dict[str, str] | None = None) -> dict[str, str]:
    """Labels with Prometheus' names. Where two names become one (`gpu.uuid` and `gpu_uuid`), the label
    already so named wins, else the first by name. `cache` keeps the names made across calls."""
    out: dict[str, str] = {}
    for name, value in labels:
        if cache is None:
            clean = prom_label_name(name)
        else:
            got = cache.get(name)
            clean = got if got is not None else cache.setdefault(name, prom_label_name(name))
        if clean not in out or clean == name:
            out[clean] = value
    return out
