"""alertd: alerting for machine-learning training runs."""

__version__ = "0.1.0"
