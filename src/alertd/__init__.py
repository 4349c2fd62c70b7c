"""alertd: alerting for machine-learning training runs."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it from here (`[tool.setuptools.dynamic]`)."""
