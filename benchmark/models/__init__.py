"""Trunks and the embedder. Importing this package registers every trunk."""

from benchmark.models.bninception import BNINCEPTION_SPEC
from benchmark.models.trunks import TRUNKS

TRUNKS.register("bninception", BNINCEPTION_SPEC)

__all__ = ["TRUNKS"]
