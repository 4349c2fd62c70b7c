"""The `tensorboard` source: `source` (discovery and tailing), `events` (decoding an event's scalars),
`tfrecord` (the file's record framing and its CRCs)."""

from alertd.sources.tensorboard.source import TensorBoardSource

__all__ = ["TensorBoardSource"]
