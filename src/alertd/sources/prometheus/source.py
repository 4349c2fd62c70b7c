"""The `prometheus` source: PromQL instant queries against a Prometheus server, each interval.

Each poll runs every query (at most 4 at once) as an instant query at the poll's time; each element of
an answer is one sample (see `alertd.sources.prometheus.answer` for the metric and the labels), at the
element's own timestamp, with no step. An answer is parsed off the event loop when it is large.

One query failing (Prometheus' error answer, a matrix result, a series without a name, too many
series, a timeout) does not lose the others' samples: the poll returns what the rest gave, and the
failure is logged when it first happens (and when it changes), its recovery too. Only when every query
fails does the poll fail. A query whose answer went over one of its limits (`max_series`, `max_answer`)
is also in the source's health, at every poll that meets it (`take_cuts`: `alertd.sources.limits`). A
failure of the server itself (refused credentials, TLS, no endpoint, no connection after the retries)
fails the poll at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence

from alertd.errors import SourceError
from alertd.model import Sample
from alertd.sources.config import PrometheusConfig, PrometheusQuery
from alertd.sources.httpretry import Sleep
from alertd.sources.limits import Cuts
from alertd.sources.prometheus.answer import AnswerError, TooManySeries, samples_of
from alertd.sources.prometheus.client import PromClient, QueryFailed, QueryOverLimit

log = logging.getLogger(__name__)

CONCURRENCY = 4
"""Queries of one source in flight at once."""
INLINE_PARSE = 64 * 1024
"""Answers up to this size are parsed on the event loop (a thread hop costs more than they do)."""


def _shown(expr: str) -> str:
    one_line = " ".join(expr.split())
    return one_line if len(one_line) <= 80 else one_line[:77] + "..."


class PrometheusSource:
    """Polls a Prometheus server's instant-query API; keeps no cursor (each poll asks for the present)."""

    def __init__(self, cfg: PrometheusConfig, *, sleep: Sleep | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.interval = cfg.interval
        self.client = PromClient(cfg, sleep=sleep)
        self._limit = asyncio.Semaphore(CONCURRENCY)
        self._failing: dict[int, str] = {}
        """The queries that failed at the last poll, with the message logged."""
        self.cuts = Cuts()

    def __repr__(self) -> str:
        return f"PrometheusSource(name={self.name!r}, host={self.client.host!r})"

    async def aclose(self) -> None:
        await self.client.aclose()

    def where(self, index: int) -> str:
        """`prometheus source prom: queries[1] ('avg by (job) (...)') at host:9090` for messages."""
        expr = self.cfg.queries[index].query
        return f"prometheus source {self.name}: queries[{index}] ({_shown(expr)!r}) at {self.client.host}"

    async def poll(self, now: float) -> Sequence[Sample]:
        """One sample per series each query answers now."""
        queries = self.cfg.queries
        results = await asyncio.gather(*(self._one(q, now) for q in queries), return_exceptions=True)
        out: list[Sample] = []
        failed: dict[int, QueryFailed] = {}
        for i, result in enumerate(results):
            if isinstance(result, QueryFailed):
                failed[i] = result
            elif isinstance(result, BaseException):
                if isinstance(result, SourceError):
                    raise SourceError(
                        f"prometheus source {self.name}: {result}",
                        recoverable=result.recoverable,
                    ) from None
                raise result
            else:
                out.extend(result)
        if failed and len(failed) == len(queries):
            i, first = next(iter(failed.items()))
            more = f" (and {len(failed) - 1} more of its queries failed)" if len(failed) > 1 else ""
            recoverable = any(e.recoverable for e in failed.values())
            raise SourceError(f"{self.where(i)}: {first}{more}", recoverable=recoverable)
        self._report(failed)
        for i, exc in failed.items():
            if isinstance(exc, QueryOverLimit):
                self.cuts.add(f"{self.where(i)}: {exc}")
        return out

    def take_cuts(self) -> list[str]:
        """The queries the polls since the last call left unread at one of their limits."""
        return self.cuts.take()

    def _report(self, failed: dict[int, QueryFailed]) -> None:
        for i, exc in failed.items():
            message = str(exc)
            if self._failing.get(i) != message:
                log.error("%s: %s", self.where(i), message, extra={"source": self.name})
            self._failing[i] = message
        for i in [i for i in self._failing if i not in failed]:
            del self._failing[i]
            log.info("%s: works again", self.where(i), extra={"source": self.name})

    async def _one(self, q: PrometheusQuery, now: float) -> list[Sample]:
        async with self._limit:
            body = await self.client.query(q.query, now)
        parse = functools.partial(
            samples_of, body, source=self.name, metric=q.metric, labels=q.labels, max_series=q.max_series
        )
        try:
            return parse() if len(body) <= INLINE_PARSE else await asyncio.to_thread(parse)
        except AnswerError as exc:
            kind = QueryOverLimit if isinstance(exc, TooManySeries) else QueryFailed
            raise kind(self.client.redact(str(exc))[:500]) from None
