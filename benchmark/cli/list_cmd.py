"""``dmlbench list KIND``: what is registered, with defaults and search spaces."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from benchmark import config
from benchmark.budgets import BUDGETS
from benchmark.data import DATASETS
from benchmark.errors import ConfigError, UnknownNameError
from benchmark.losses import LOSSES
from benchmark.metrics import METRICS
from benchmark.models.registry import TRUNKS
from benchmark.plugins import source_of
from benchmark.protocol.registry import protocol_specs
from benchmark.search.options import SAMPLERS

# Every registry imported here is a declaration that needs no torch, faiss or Optuna: `dmlbench list`
# answers in a fraction of a second (tests/test_bad_input.py checks that torch stays unimported).


def _losses() -> list[str]:
    out = []
    for name, s in LOSSES.items():
        kind = "pair-based (m=4)" if s.pair_based else "class-based (m=1)"
        plugin = source_of("loss", name)
        origin = f"plugin: {plugin.describe()}" if plugin else s.source
        out.append(
            f"{name:12s} {s.display_name} [{origin}; {kind}; {s.embedding_space}"
            f"{'; learnable params' if s.has_parameters else ''}]"
        )
        if s.description:
            out.append(f"    {s.description}")
        out.append("    defaults: " + ", ".join(f"{k}={v:g}" for k, v in s.defaults.items()))
        space = ", ".join(
            f"{k} ∈ [{d.low:g}, {d.high:g}]{' log' if d.log else ''}" for k, d in s.search_space.items()
        )
        out.append(f"    search:   {space or '(nothing to tune)'}")
    return out


def _plugin(kind: str, name: str) -> str:
    source = source_of(kind, name)
    return f" [plugin: {source.describe()}]" if source else ""


def _datasets() -> list[str]:
    return [
        f"{n:12s} {s.description}{' (needs --data-dir)' if s.requires_data_dir else ''}"
        + _plugin("dataset", n)
        for n, s in DATASETS.items()
    ]


def _protocols() -> list[str]:
    out = []
    names, broken = config.scan_protocols()
    for name in sorted([*names, *broken]):
        if name in broken:
            # Shown, not fatal: the other protocols stay usable.
            out.append(f"{name:12s} BROKEN: {broken[name]}")
            continue
        try:
            data = config.load_protocol_file(name)
        except ConfigError as exc:  # changed or removed since the scan
            out.append(f"{name:12s} BROKEN: {exc}")
            continue
        path = config.protocol_path(name)
        out.append(f"{name:12s} {data['protocol'].get('description', '')}  ({path})")
    return out


def _budgets() -> list[str]:
    out = []
    for n, b in BUDGETS.items():
        out.append(f"{n:8s} {b.description}")
        for k, v in b.overrides.items():
            out.append(f"    {k} = {v!r}")
        for spec in protocol_specs():  # a protocol's own overrides for this budget (its module's)
            if n not in spec.budget_overrides:
                continue
            out.append(f"  for protocol {spec.name} instead:")
            for k, v in spec.budget_overrides[n].items():
                out.append(f"    {k} = {v!r}")
    return out


def _trunks() -> list[str]:
    return [f"{n:12s} {s.description}{_plugin('trunk', n)}" for n, s in TRUNKS.items()] + [
        "timm:NAME    any timm model by name (optional extra: pip install 'dmlbench[timm]')"
    ]


def _metrics() -> list[str]:
    return [
        f"{n:16s} {s.display_name} ({'higher' if s.higher_is_better else 'lower'} is better)"
        for n, s in METRICS.items()
    ]


def _samplers() -> list[str]:
    return [f"{n:8s} {doc}" for n, doc in SAMPLERS.items()]


KINDS: dict[str, Callable[[], list[str]]] = {
    "losses": _losses,
    "datasets": _datasets,
    "protocols": _protocols,
    "budgets": _budgets,
    "trunks": _trunks,
    "metrics": _metrics,
    "samplers": _samplers,
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered components", description=__doc__)
    p.add_argument("kind", nargs="*", help="one of: " + ", ".join(KINDS))
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    kinds = list(args.kind)
    if len(kinds) != 1:
        given = f"got {len(kinds)} ({' '.join(kinds)})" if kinds else "got none"
        raise ConfigError(
            f"`dmlbench list` takes one kind, {given}: dmlbench list KIND, with KIND one of "
            + ", ".join(KINDS)
            + " (e.g. dmlbench list losses)."
        )
    kind = kinds[0]
    if kind not in KINDS:
        raise UnknownNameError("list kind", kind, list(KINDS))
    print("\n".join(KINDS[kind]()))
    return 0
