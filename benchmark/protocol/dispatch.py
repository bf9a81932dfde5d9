"""Which run class executes a protocol file: the one its kind declares (``[protocol] name``)."""

from __future__ import annotations

import benchmark.native  # noqa: F401  (faiss's and torch's native libraries in a fixed order)
from benchmark.protocol.base import ProtocolRun
from benchmark.protocol.registry import file_protocol_spec


def runner_for(protocol: str) -> type[ProtocolRun]:
    """The run class of ``protocols/<protocol>.toml`` (an unknown kind names the known ones)."""
    runner: type[ProtocolRun] = file_protocol_spec(protocol).runner_class()
    return runner
