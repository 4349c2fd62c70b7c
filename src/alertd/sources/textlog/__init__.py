"""The `textlog` source: plain-text training logs (and `alertd exec`'s child output) as samples."""

from alertd.sources.textlog.parse import FileState, LineParser, Parsed
from alertd.sources.textlog.source import TextLogSource
from alertd.sources.textlog.stream import LogStream

__all__ = ["FileState", "LineParser", "LogStream", "Parsed", "TextLogSource"]
