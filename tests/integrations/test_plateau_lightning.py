"""alertd's `plateau` fires at the epoch where Lightning's real EarlyStopping, in a real Trainer, stops.

A tiny LightningModule (one parameter, CPU, no logger, no checkpoints) logs `val_loss` from a fixed sequence
in its validation step, one value per epoch; EarlyStopping watches it. The values Lightning saw (its
`callback_metrics`, float32) are then replayed through a rule with the same patience, min_delta and mode.
The sequences are dyadic fractions, exact in float32, so Lightning's float32 arithmetic and alertd's float64
make the same comparisons (the strict `<`, a value exactly min_delta better, included).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from lightning.pytorch.callbacks import Callback, EarlyStopping  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from alertd.buffer import BufferLimits  # noqa: E402
from alertd.config import RuleConfig  # noqa: E402
from alertd.dryrun import Replay  # noqa: E402
from alertd.model import Sample, SeriesKey  # noqa: E402
from alertd.rules import RuleSet  # noqa: E402


class Scripted(L.LightningModule):
    """Trains one parameter; its validation step logs the next value of a fixed sequence."""

    def __init__(self, sequence: list[float]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.sequence = sequence

    def training_step(self, batch: tuple[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return ((self.w - batch[0]) ** 2).mean()

    def validation_step(self, batch: tuple[torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.sequence[self.current_epoch])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Seen(Callback):
    """What EarlyStopping saw at each validation: (epoch, value)."""

    def __init__(self) -> None:
        self.values: list[tuple[int, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.values.append((trainer.current_epoch, float(trainer.callback_metrics["val_loss"])))


def lightning_stop(sequence: list[float], patience: int, min_delta: float, mode: str) -> tuple[int | None, list[float]]:
    """The epoch where EarlyStopping stopped a real training (None: it ran every epoch), and the values seen."""
    key = (tuple(sequence), patience, min_delta, mode)
    if key not in _RUNS:
        _RUNS[key] = _fit(sequence, patience, min_delta, mode)
    return _RUNS[key]


_RUNS: dict[tuple[object, ...], tuple[int | None, list[float]]] = {}


def _fit(sequence: list[float], patience: int, min_delta: float, mode: str) -> tuple[int | None, list[float]]:
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=4)
    stop = EarlyStopping(monitor="val_loss", patience=patience, min_delta=min_delta, mode=mode)
    seen = Seen()
    callbacks = [seen, stop]  # Seen first: it runs before EarlyStopping's own on_validation_end
    trainer = L.Trainer(
        max_epochs=len(sequence),
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,  # type: ignore[arg-type]
    )
    trainer.fit(Scripted(sequence), train_dataloaders=data, val_dataloaders=data)
    epochs = [e for e, _ in seen.values]
    assert epochs == list(range(len(epochs)))
    stopped = stop.stopped_epoch if trainer.should_stop and len(epochs) < len(sequence) else None
    if stopped is not None:
        assert stopped == epochs[-1]  # it stopped after validating that epoch: no later epoch ran
    return stopped, [v for _, v in seen.values]


def alertd_first_firing(values: list[float], patience: int, min_delta: float, mode: str) -> int | None:
    """The epoch (the sample's step) at which the rule first fires, replaying the values one per minute."""
    spec = {"patience": patience, "min_delta": min_delta, "mode": mode}
    r = RuleConfig.model_validate({"name": "p", "metric": "val_loss", "condition": {"plateau": spec}}).build()
    replay = Replay(RuleSet([r]), BufferLimits())
    key = SeriesKey("val_loss", (("run", "lit"),))
    for epoch, v in enumerate(values):
        for t in replay.feed([Sample(key, 60.0 * epoch, epoch, v)]).transitions:
            if t.state.value == "firing":
                return t.step
    return None


CASES = [
    # (sequence, patience, min_delta, mode)
    ([1.0, 0.75, 0.75, 0.875, 0.5, 0.5, 0.625, 0.5625, 0.5, 0.25, 0.25], 3, 0.0, "min"),
    ([1.0, 0.9375, 0.875, 0.75, 0.6875, 0.625, 0.5], 2, 0.125, "min"),  # 0.875 is exactly min_delta better: no
    ([0.5, 0.625, 0.6875, 0.75, 0.8125, 0.8125, 0.875, 0.9], 2, 0.0625, "max"),
    ([1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125], 1, 0.0, "min"),  # always improving: never stops
]


@pytest.mark.parametrize(("sequence", "patience", "min_delta", "mode"), CASES)
def test_plateau_fires_at_the_epoch_early_stopping_stops(
    sequence: list[float], patience: int, min_delta: float, mode: str
) -> None:
    stopped, seen = lightning_stop(sequence, patience, min_delta, mode)
    assert seen == sequence[: len(seen)]  # the values Lightning saw are the sequence's
    full = seen + sequence[len(seen) :]  # alertd sees the whole sequence: it fires at the stop, not after
    assert alertd_first_firing(full, patience, min_delta, mode) == stopped


def test_the_cases_stop_where_expected() -> None:
    """The cases cover a stop in each mode, one at exactly min_delta, and no stop (so the test above can fail)."""
    assert [lightning_stop(*c)[0] for c in CASES] == [7, 2, 5, None]
