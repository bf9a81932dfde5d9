"""Trunks and the embedder. Importing this package registers every trunk (without importing torch)."""

from benchmark.models.registry import TRUNKS

__all__ = ["TRUNKS"]
