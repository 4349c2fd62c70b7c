"""Test doubles shipped with alertd, for its own tests and benchmarks and for users' rule tests."""

from alertd.testing.fake_nvml import FakeGpu, FakeHandle, FakeNvml, FakeProcess, make_gpus

__all__ = ["FakeGpu", "FakeHandle", "FakeNvml", "FakeProcess", "make_gpus"]
