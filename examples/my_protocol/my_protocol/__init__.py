"""``smalldb``: closed-set retrieval (dmlbench's ``cbir`` protocol) with a small database.

The protocol's own setting, ``database_per_class`` (the ``[settings]`` table of ``smalldb.toml``,
or ``--set settings.database_per_class=N``), keeps at most that many images of each class in the
database, which is also the training set: how well does a loss retrieve when each class has only a
few labelled images? The queries are cbir's, so every value of the setting is scored on the same
queries. The record names the setting (``config.settings``) and the database it gave
(``data.database_per_class``, ``data.n_database_images``).

This module is the declaration only: dmlbench imports it (through the entry point) to check a
config before torch is imported. The run step is :mod:`my_protocol.run`, imported when the run starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import ConfigError
from benchmark.lazy import lazy_callable
from benchmark.protocol.cbir import PROTOCOL as CBIR
from benchmark.protocol.registry import ProtocolSpec

#: The protocol file shipped with the package (``dmlbench run --protocol-file`` takes its path).
PROTOCOL_FILE = Path(__file__).with_name("smalldb.toml")


@dataclass(frozen=True)
class SmallDatabaseSettings:
    """The ``[settings]`` block: its keys, their types and defaults (checked strictly by dmlbench)."""

    #: Database (= training) images kept of each class, the first ones of cbir's seeded split.
    database_per_class: int = 4

    def __post_init__(self) -> None:
        if self.database_per_class < 2:
            # Two at least: a pair-based loss needs a positive pair in each class.
            raise ConfigError(f"settings.database_per_class must be >= 2, got {self.database_per_class}.")


PROTOCOL = ProtocolSpec(
    "smalldb",
    lazy_callable("my_protocol.run:SmallDatabaseRun"),
    # cbir's budgets (small CNN, 28 px, few epochs and reps) suit this variant too.
    budget_overrides=CBIR.budget_overrides,
    settings=SmallDatabaseSettings,
)
