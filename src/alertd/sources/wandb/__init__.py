"""The Weights & Biases sources: `api` (the `wandb` source over the GraphQL API) with its HTTP client
`http`; `offline` (the `wandb_dir` source over `.wandb` files) with its record framing `records` and its
protobuf decoding `proto`; `values` (how W&B's values become samples, shared by both)."""

from alertd.sources.wandb.api import WandbSource
from alertd.sources.wandb.offline import WandbDirSource

__all__ = ["WandbDirSource", "WandbSource"]
