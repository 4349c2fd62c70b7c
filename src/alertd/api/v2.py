"""Alertmanager's API v2, the part `amtool` uses, over alertd's own state (its OpenAPI shapes, `api/v2/openapi.yaml`).

- `GET/POST /api/v2/silences`, `GET/DELETE /api/v2/silence/{id}`: the same silence store as `/api/v1/silences`
  (a silence made through one shows in the other).
- `GET /api/v2/alerts`: the firing alerts, with their receivers and whether a silence or an inhibition rule
  mutes them; `filter` (matchers), `active`, `silenced`, `inhibited`, `receiver` as amtool sends them.
- `GET /api/v2/status`: what amtool's `config` and `cluster` commands read; `config.original` is the routing
  part of the rules as an Alertmanager configuration (`amtool config routes` loads it): route, receivers by
  name only, inhibit rules, time intervals; no notifier's settings, so no secret. A route with several
  receivers names one receiver, their names joined by `+`; `send_resolved` (a receiver's setting in
  Alertmanager) and a rule's `notify:` are alertd's own and left out.
- `GET /api/v2/receivers`: the receivers' names.

The routes sit under `/api/`, so the bearer token, when configured, is wanted here too; amtool sends one
with `--http.config.file` (a file holding `authorization: {credentials: <token>}`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from alertd.api.models import MatcherIn, SilenceIn, silence_from, silence_json
from alertd.api.view import AlertsView, ServiceView
from alertd.dispatch.matchers import Matcher, Silence, alert_label_map, matches_all, parse_matchers
from alertd.dispatch.routes import bypass_route
from alertd.durations import format_duration
from alertd.model import Alert, AlertState, am_labels, format_time
from alertd.userregex import compile_user_regex

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
Filters = Annotated[list[str] | None, Query(max_length=100)]


class PostableSilence(BaseModel):
    """Alertmanager's `postableSilence`: an `id` updates that silence, none makes a new one."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=100)
    matchers: list[MatcherIn] = Field(min_length=1, max_length=100)
    startsAt: datetime
    endsAt: datetime
    createdBy: str = Field(max_length=1000)
    comment: str = Field(max_length=10_000)


class V2Error(Exception):
    """Alertmanager answers errors as a JSON string."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def v2_router(service: ServiceView, error: type[Exception]) -> APIRouter:
    """The `/api/v2` routes over `service` (an `alertd.service.Service`); `error(status, message)` answers an error."""
    api = APIRouter(prefix="/api/v2", tags=["alertmanager v2"])

    @api.get("/status")
    async def status() -> dict[str, Any]:
        """Enough of Alertmanager's status for amtool: no cluster, alertd's version, the routing config."""
        now = service.clock.now()
        started = service.started_at or now
        return {
            "cluster": {"status": "disabled", "peers": []},
            "versionInfo": {
                "version": "alertd",
                "revision": "",
                "branch": "",
                "buildUser": "",
                "buildDate": "",
                "goVersion": "",
            },
            "config": {"original": routing_yaml(service)},
            "uptime": format_time(started),
        }

    @api.get("/receivers")
    async def receivers() -> list[dict[str, str]]:
        """Every receiver of `config.original`, by name."""
        return alertmanager_config(service)["receivers"]  # type: ignore[no-any-return]

    _v2_silences(api, service, error)

    @api.get("/alerts")
    async def alerts(
        filter: Filters = None,
        active: bool = True,
        silenced: bool = True,
        inhibited: bool = True,
        unprocessed: bool = True,
        receiver: Annotated[str | None, Query(max_length=1000)] = None,
    ) -> list[dict[str, Any]]:
        """The firing alerts as Alertmanager's `gettableAlert`s, filtered as Alertmanager filters them."""
        wanted = _filters(filter, error)
        try:
            by_receiver = compile_user_regex(f"^(?:{receiver})$") if receiver else None
        except ValueError as exc:
            raise error(400, f"receiver: {exc}") from None
        shown = {"silencedBy": silenced, "inhibitedBy": inhibited}
        out = []
        for a in _firing(service):
            item = gettable_alert(service, a)
            st = item["status"]
            if not matches_all(wanted, item["labels"]):
                continue
            if by_receiver is not None and not any(by_receiver.match(r["name"]) for r in item["receivers"]):
                continue
            if any(st[key] and not wanted_too for key, wanted_too in shown.items()) or (
                st["state"] == "active" and not active
            ):
                continue
            out.append(item)
        return out

    return api


def _v2_silences(api: APIRouter, service: ServiceView, error: type[Exception]) -> None:
    @api.get("/silences")
    async def silences(filter: Filters = None) -> list[dict[str, Any]]:
        """Every silence, optionally those whose matchers include all `filter` matchers (as Alertmanager)."""
        now = service.clock.now()
        wanted = _filters(filter, error)
        out = [s for s in service.silences.list() if all(m in s.matchers for m in wanted)]
        return [gettable_silence(s, now) for s in sorted(out, key=lambda s: _silence_order(s, now))]

    @api.post("/silences")
    async def post_silence(body: PostableSilence) -> dict[str, str]:
        """Create a silence, or update the one `id` names as Alertmanager does: in place when only its end
        (or a pending one's start) changes, else that one is expired and a new one made; `{"silenceID": ...}`."""
        now = service.clock.now()
        if body.endsAt.timestamp() < now:
            raise error(400, "silence invalid: end time can't be in the past")
        old = service.silences.get(body.id) if body.id is not None else None
        if body.id is not None and old is None:
            raise error(404, f"silence {body.id} not found")
        try:
            new = silence_from(SilenceIn.model_validate(body.model_dump(exclude={"id"})), now)
        except ValueError as exc:
            raise error(400, f"silence invalid: {exc}") from None
        if old is not None and _can_update(old, new, now):
            service.silences.add(replace(new, id=old.id))
            return {"silenceID": old.id}
        if old is not None and old.state(now) != "expired":
            service.silences.expire(old.id, now)
        new = replace(new, starts_at=max(new.starts_at, now))  # Alertmanager starts a past start now
        service.silences.add(new)
        return {"silenceID": new.id}

    @api.get("/silence/{silence_id}")
    async def get_silence(silence_id: str) -> dict[str, Any]:
        """One silence."""
        found = service.silences.get(silence_id)
        if found is None:
            raise error(404, f"silence {silence_id} not found")
        return gettable_silence(found, service.clock.now())

    @api.delete("/silence/{silence_id}")
    async def delete_silence(silence_id: str) -> None:
        """Expire a silence now."""
        try:
            service.silences.expire(silence_id, service.clock.now())
        except KeyError:
            raise error(404, f"silence {silence_id} not found") from None


def _can_update(old: Silence, new: Silence, now: float) -> bool:
    """Alertmanager's `canUpdate`: the same matchers, and an active one keeps its start and does not end in
    the past, a pending one does not start in the past; an expired one is never updated."""
    if old.matchers != new.matchers:
        return False
    state = old.state(now)
    if state == "active":
        return abs(new.starts_at - old.starts_at) < 0.001 and new.ends_at >= now  # times are shown in ms
    return state == "pending" and new.starts_at >= now


def _silence_order(s: Any, now: float) -> tuple[int, float]:
    """Alertmanager's `SortSilences`: active (soonest end first), pending (soonest start), expired (latest end)."""
    state = s.state(now)
    if state == "active":
        return (0, s.ends_at)
    return (1, s.starts_at) if state == "pending" else (2, -s.ends_at)


def _filters(texts: Sequence[str] | None, error: type[Exception]) -> tuple[Matcher, ...]:
    try:
        return tuple(m for t in (texts or [])[:100] for m in parse_matchers(t))
    except ValueError as exc:
        raise error(400, str(exc)) from None


def _firing(service: AlertsView) -> list[Alert]:
    alerts = service.engine.state.alerts(service.engine.ruleset.rules)
    return [a for a in alerts if a.state is AlertState.FIRING]


def gettable_silence(s: Any, now: float) -> dict[str, Any]:
    """A silence as Alertmanager's `gettableSilence`."""
    out = silence_json(s, now)
    out["updatedAt"] = out["startsAt"] if now < s.starts_at else format_time(min(now, s.ends_at))
    return out


def gettable_alert(service: ServiceView, a: Alert) -> dict[str, Any]:
    """A firing alert as Alertmanager's `gettableAlert`."""
    now = service.clock.now()
    match_labels = alert_label_map(a.rule, a.labels, a.severity)
    dispatcher = service.dispatcher
    assert dispatcher is not None  # the API is served once the service is open
    root = dispatcher.route
    routes = [bypass_route(root, tuple(a.notify))] if a.notify else root.match(match_labels)
    receivers = sorted({r for route in routes for r in route.receivers})
    silenced_by = [s.id for s in service.silences.active(now) if s.matches(match_labels)]
    sources = {b.fingerprint: alert_label_map(b.rule, b.labels, b.severity) for b in _firing(service) if b is not a}
    inhibited_by = sorted(
        {by for rule in dispatcher.inhibit_rules if (by := rule.inhibitor(a.fingerprint, match_labels, sources))}
    )
    return {
        "labels": dict(am_labels(a.rule, a.labels, a.severity)),
        "annotations": dict(a.annotations),
        "startsAt": format_time(a.fired_at if a.fired_at is not None else a.active_at),
        "endsAt": GO_ZERO_TIME,
        "updatedAt": format_time(a.time),
        "generatorURL": "",
        "fingerprint": a.fingerprint,
        "receivers": [{"name": r} for r in receivers],
        "status": {
            "state": "suppressed" if silenced_by or inhibited_by else "active",
            "silencedBy": silenced_by,
            "inhibitedBy": inhibited_by,
        },
    }


def routing_yaml(service: ServiceView) -> str:
    """`alertmanager_config` as YAML, with a comment on what it leaves out."""
    head = (
        "# alertd's routing as an Alertmanager configuration. A route with several receivers names them joined\n"
        "# by '+'; send_resolved and the rules' notify: are alertd's own and not shown.\n"
    )
    return head + yaml.safe_dump(alertmanager_config(service), sort_keys=False)


def alertmanager_config(service: ServiceView) -> dict[str, Any]:
    """The routing part of the loaded rules as an Alertmanager configuration that Alertmanager's own loader
    accepts: `route` (the root with its resolved receiver, grouping and timings), `receivers` (names only:
    notifiers hold secrets), `inhibit_rules`, `time_intervals`."""
    cfg = service.config
    resolved = cfg.route.to_route()
    names: list[str] = list(cfg.notifiers)

    def receiver(given: list[str]) -> str:
        name = "+".join(given) if given else "none"
        if name not in names:
            names.append(name)
        return name

    def node(rc: Any, root: bool) -> dict[str, Any]:
        body = rc.model_dump(
            mode="json", by_alias=True, exclude_defaults=True, exclude={"receiver", "receivers", "send_resolved"}
        )
        body.pop("routes", None)
        given = list(resolved.receivers) if root else rc.receiver_list()
        out: dict[str, Any] = {} if given is None else {"receiver": receiver(given)}
        if root:
            body.update(
                group_by=list(resolved.group_by),
                group_wait=format_duration(resolved.group_wait),
                group_interval=format_duration(resolved.group_interval),
                repeat_interval=format_duration(resolved.repeat_interval),
            )
        out.update(body)
        if rc.routes:
            out["routes"] = [node(child, False) for child in rc.routes]
        return out

    route = node(cfg.route, True)
    return {
        "route": route,
        "receivers": [{"name": n} for n in names],
        "inhibit_rules": [r.model_dump(mode="json", exclude_defaults=True) for r in cfg.inhibit_rules],
        "time_intervals": [t.model_dump(mode="json", exclude_none=True) for t in cfg.route.time_interval_configs()],
    }
