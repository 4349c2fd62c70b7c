"""The series of an MLflow run: labels, metric names and the samples of a run's end.

Labels: `source` (the configured name), `run` (the MLflow run id), `run_name`, `experiment` (the
experiment's name). The metric is the MLflow metric key as logged (`train/loss`). Once per run end:
`run.finished` = 1 and `run.crashed` = 1 for FAILED or KILLED, 0 for FINISHED, at the run's end time.
"""

from __future__ import annotations

from dataclasses import dataclass

from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.mlflow.values import crashed_value


@dataclass(frozen=True, slots=True)
class RunLabels:
    """What names one run in its samples."""

    run_id: str
    run_name: str = ""
    experiment: str = ""


class SeriesKeys:
    """Builds (and reuses) the SeriesKey of each run and metric of one source."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._keys: dict[str, dict[tuple[RunLabels, str], SeriesKey]] = {}

    def key(self, run: RunLabels, metric: str) -> SeriesKey:
        """The series of `metric` in `run`."""
        cache = self._keys.setdefault(run.run_id, {})
        key = cache.get((run, metric))
        if key is None:
            labels = {
                "source": self.source,
                "run": run.run_id,
                "run_name": run.run_name,
                "experiment": run.experiment,
            }
            key = cache[(run, metric)] = SeriesKey(metric, make_labels(labels))
        return key

    def forget(self, run_id: str) -> None:
        """Drop the cached keys of a run (renamed, or not read for now)."""
        self._keys.pop(run_id, None)

    def run_end(self, run: RunLabels, status: str, time: float) -> list[Sample]:
        """The two samples of a run's end (`status` FINISHED, FAILED or KILLED)."""
        return [
            Sample(self.key(run, "run.finished"), time, None, 1.0),
            Sample(self.key(run, "run.crashed"), time, None, crashed_value(status)),
        ]
