"""Which runner class executes a protocol file: chosen by the file's ``[protocol] name``."""

from __future__ import annotations

import benchmark.native  # noqa: F401  (faiss's and torch's native libraries in a fixed order)
from benchmark.config import load_protocol_file, protocol_kind
from benchmark.protocol.cbir import CBIRRun
from benchmark.protocol.runner import MLRCRun
from benchmark.protocol.traditional import TraditionalRun
from benchmark.registry import Registry

RUNNERS: Registry[type[MLRCRun]] = Registry("protocol kind")
RUNNERS.register("mlrc", MLRCRun)
RUNNERS.register("traditional", TraditionalRun)
RUNNERS.register("cbir", CBIRRun)


def runner_for(protocol: str) -> type[MLRCRun]:
    """The runner class of ``protocols/<protocol>.toml`` (an unknown kind names the known ones)."""
    return RUNNERS.get(protocol_kind(load_protocol_file(protocol)))
