"""dmlbench: a benchmark suite for deep-metric-learning losses (MLRC protocol and friends)."""

__version__ = "0.1.0"
