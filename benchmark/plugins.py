"""Outside code as benchmark components, by kind name: the registries that take plugins.

The mechanism (entry points, ``MODULE:NAME`` / ``PATH.py:NAME`` references, ``DMLBENCH_PLUGINS``,
where each component came from) is the registry's own, :mod:`benchmark.registry`; what each kind's
plugin must name is checked by that kind's registry module (``adopt_loss`` in
:mod:`benchmark.losses.registry`, and so on). This module maps the kind names the command line and
:mod:`benchmark.api` use (``loss``, ``dataset``, ``trunk``, ``metric``, ``budget``) to those
registries. A plugin may name:

- a loss: a :class:`~benchmark.losses.registry.LossSpec`, or a ``torch.nn.Module`` subclass
  declaring ``defaults``, ``search_space``, ``pair_based``, ``embedding_space`` (and optionally
  ``name``, ``display_name``, ``description``, ``has_parameters``, ``param_weight_decay``) as
  class attributes, built as ``cls(LossContext(num_classes, embedding_dim), params)``; entry-point
  group ``dmlbench.losses``;
- a dataset: a :class:`~benchmark.data.DatasetSpec` (``dmlbench.datasets``); a trunk: a
  :class:`~benchmark.models.registry.TrunkSpec` (``dmlbench.trunks``); a metric: a
  :class:`~benchmark.metrics.MetricSpec` (``dmlbench.metrics``); a budget: a
  :class:`~benchmark.budgets.Budget` (``dmlbench.budgets``); a protocol kind: a
  :class:`~benchmark.protocol.registry.ProtocolSpec` (``dmlbench.protocols``, found through its
  protocol file's ``[protocol] name``).

Anything else (a missing attribute, a wrong type, an import error, a name a built-in already has)
is a :class:`~benchmark.errors.ConfigError` naming what is wrong: exit status 2 on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.budgets import BUDGETS
from benchmark.data.registry import DATASETS
from benchmark.errors import DmlbenchError
from benchmark.losses.registry import LOSSES
from benchmark.metrics.registry import METRICS
from benchmark.models.registry import TRUNKS
from benchmark.registry import ENV_VAR, PluginSource, PluginSourceDoc, Registry, is_ref
from benchmark.registry import record_sources as _record_sources

__all__ = [
    "ENV_VAR",
    "GROUPS",
    "REGISTRIES",
    "PluginSource",
    "is_ref",
    "load_ref",
    "record_sources",
    "registry_of",
    "source_of",
]

#: The registry of each kind that a reference may name (the kind is the registry's ``kind``).
REGISTRIES: dict[str, Registry[Any]] = {r.kind: r for r in (LOSSES, DATASETS, TRUNKS, METRICS, BUDGETS)}
#: Entry-point group of each kind.
GROUPS: dict[str, str] = {kind: r.group for kind, r in REGISTRIES.items() if r.group is not None}


def registry_of(kind: str) -> Registry[Any]:
    """The registry of plugin kind ``kind`` (an unknown kind is an error naming the kinds)."""
    if kind not in REGISTRIES:
        raise DmlbenchError(f"No plugins of kind {kind!r}; plugin kinds: {', '.join(REGISTRIES)}.")
    return REGISTRIES[kind]


def load_ref(kind: str, ref: str) -> str:
    """Import the ``kind`` component named by ``ref`` (``MODULE:NAME`` or ``PATH.py:NAME``), register
    it, return its registry name (:meth:`benchmark.registry.Registry.load_ref`)."""
    return registry_of(kind).load_ref(ref)


def source_of(kind: str, name: str) -> PluginSource | None:
    """The plugin source of the registered ``kind`` component ``name`` (None: a built-in)."""
    return registry_of(kind).source_of(name)


def record_sources(components: Mapping[str, str]) -> list[PluginSourceDoc]:
    """The sources of those of ``components`` (kind -> registered name) that are plugins."""
    return _record_sources(REGISTRIES, components)
