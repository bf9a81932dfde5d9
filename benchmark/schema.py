"""How a reader treats a key of the run record schema (torch-free, imports nothing of dmlbench).

The schema's TypedDicts (:mod:`benchmark.records`, :class:`benchmark.registry.PluginSourceDoc`)
are its one declaration: the writers build them (checked by mypy) and
:func:`benchmark.records.parse_record` validates a document by walking their annotations. What a
reader does when a key is absent or null is declared beside the key's type, as metadata of its
annotation (``Annotated[str, NEEDED]``, ``Annotated[str, Read(default="unknown")]``; mypy reads
``Annotated[T, ...]`` as ``T``), so one declaration says both what is written and how it is read.

Without a :class:`Read` a key may be absent (records written before it existed, hand-made ones):
a key the TypedDict declares required then reads as None where its type admits None, else stays
absent (no reader indexes it); an optional key always stays absent when absent (readers ``.get``
it), so a complete record reads back as exactly the document written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Read:
    """What a reader does when a record lacks the key or holds null there."""

    #: A record without the key is refused (a :class:`~benchmark.records.RecordError` naming it).
    required: bool = False
    #: Builds the value a record without the key (or, with ``null``, with null there) reads as.
    default: Callable[[], Any] | None = None
    #: Null is accepted although the type does not admit None (NaN is written as null): it reads
    #: as the default when there is one, else as None.
    null: bool = False
    #: How an error names the expected value, where the type's own name says too little.
    expected: str | None = None


#: A key every record has: its absence is an error.
NEEDED = Read(required=True)
