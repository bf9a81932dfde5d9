"""Which run class executes a protocol file: the one its kind declares (``[protocol] name``)."""

from __future__ import annotations

import benchmark.native  # noqa: F401  (faiss's and torch's native libraries in a fixed order)
from benchmark.config import load_protocol_file, protocol_kind
from benchmark.protocol.base import ProtocolRun
from benchmark.protocol.specs import protocol_spec


def runner_for(protocol: str) -> type[ProtocolRun]:
    """The run class of ``protocols/<protocol>.toml`` (an unknown kind names the known ones)."""
    runner: type[ProtocolRun] = protocol_spec(protocol_kind(load_protocol_file(protocol))).runner_class()
    return runner
