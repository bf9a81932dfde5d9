"""The protocol registry: what each protocol kind declares, importable without torch.

A protocol is a TOML file (``protocols/<name>.toml``, its paper numbers) whose ``[protocol] name``
is its *kind*, and one module that declares the kind: ``benchmark/protocol/<kind>.py`` for the
built-in ones (``mlrc``, ``traditional``, ``cbir``), or an installed distribution's entry point in
the group ``dmlbench.protocols`` naming a :class:`ProtocolSpec`. The declaration holds what the
torch-free layers need (budget overrides, the settings only this protocol reads, for ``dmlbench
list``, ``--help`` and config validation) and names its run code lazily
(:func:`benchmark.lazy.lazy_callable`), as the loss registry does. Neither ``budgets.py`` nor
``config.py`` names any protocol: adding one touches its TOML file and its module only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmark.config import (
    DatasetSettings,
    RunConfig,
    config_to_dict,
    flatten,
    load_protocol_file,
    protocol_kind,
    protocol_path,
    resolve_config,
    scan_protocols,
)
from benchmark.errors import ConfigError, UnknownNameError
from benchmark.lazy import LazyCallable
from benchmark.registry import Registry

#: Entry-point group of protocols declared by installed distributions (the name is the kind).
ENTRY_POINT_GROUP = "dmlbench.protocols"


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol kind: its run code and the settings that belong to it alone."""

    #: The ``[protocol] name`` of the TOML files this kind runs.
    name: str
    #: Builds the run from a :class:`~benchmark.protocol.request.RunRequest`: a
    #: :class:`~benchmark.protocol.base.ProtocolRun` subclass, usually a ``lazy_callable`` to it.
    runner: Callable[..., Any]
    #: Budget name -> dotted-key overrides that replace the budget's own for this protocol
    #: (protocols whose settings differ in kind from MLRC's: no search, epochs = dataset passes).
    #: A budget not named here applies its own overrides.
    budget_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Dotted config keys only this protocol reads: set for another protocol they are an error.
    only_keys: tuple[str, ...] = ()

    def overrides_for(self, budget: str, default: Mapping[str, Any]) -> Mapping[str, Any]:
        """The overrides budget ``budget`` applies to this protocol (``default``: the budget's own)."""
        return self.budget_overrides.get(budget, default)

    def runner_class(self) -> Any:
        """The run class (its module imported now: torch and the rest of the run code)."""
        return self.runner.resolve() if isinstance(self.runner, LazyCallable) else self.runner


PROTOCOLS: Registry[ProtocolSpec] = Registry("protocol kind")


def register_protocol(spec: ProtocolSpec) -> ProtocolSpec:
    """Add a protocol kind (a declaration module calls this when it is imported)."""
    return PROTOCOLS.register(spec.name, spec)


def protocol_spec(kind: str) -> ProtocolSpec:
    """The declaration of protocol kind ``kind``, imported on first use (an unknown kind names the known)."""
    if kind not in PROTOCOLS.names():
        _discover(kind)
        if kind not in PROTOCOLS.names():
            _discover_others(kind)  # so that the error lists every known kind
    return PROTOCOLS.get(kind)


def file_protocol_spec(name: str) -> ProtocolSpec:
    """The declaration of the kind of ``protocols/<name>.toml``; an unknown kind names the file."""
    kind = protocol_kind(load_protocol_file(name))
    try:
        return protocol_spec(kind)
    except UnknownNameError as exc:
        raise ConfigError(
            f"Protocol file {protocol_path(name)}: [protocol] name = {kind!r} is not a protocol kind "
            f"(known kinds: {', '.join(exc.choices) or 'none'}). Fix or remove that file."
        ) from exc


def protocol_specs() -> list[ProtocolSpec]:
    """The declarations of every usable protocol file's kind, in file-name order, each once.

    A file whose kind is unknown (or whose plugin fails to import) is left out: it must not stop
    runs of the other protocols; running it reports its error, naming the file.
    """
    names, _ = scan_protocols()
    specs: dict[str, ProtocolSpec] = {}
    for name in names:
        try:
            spec = file_protocol_spec(name)
        except ConfigError:
            continue
        specs.setdefault(spec.name, spec)
    return list(specs.values())


def budget_overrides(budget: str, kind: str) -> Mapping[str, Any]:
    """The dotted-key overrides budget ``budget`` applies to protocol kind ``kind``."""
    from benchmark.budgets import BUDGETS

    return protocol_spec(kind).overrides_for(budget, BUDGETS.get(budget).overrides)


def protocol_only_keys() -> dict[str, str]:
    """``{dotted key: protocol kind}`` of the settings that only one protocol reads."""
    return {key: spec.name for spec in protocol_specs() for key in spec.only_keys}


def check_protocol_only_keys(config: RunConfig) -> None:
    """Refuse a setting that only another protocol reads (it would be silently ignored)."""
    owned = protocol_only_keys()
    if not owned:
        return
    values = flatten(config_to_dict(config))
    defaults = flatten(config_to_dict(RunConfig()))
    for key, owner in owned.items():
        if config.protocol.name != owner and values[key] != defaults[key]:
            raise ConfigError(
                f"{key} = {values[key]!r} is only read by the {owner!r} protocol; this run's protocol "
                f"is {config.protocol.name!r}. Remove the setting or use --protocol {owner}."
            )


def resolve_run_config(
    protocol_data: Mapping[str, Any],
    budget_overrides: Mapping[str, Any],
    user_overrides: Mapping[str, Any],
    dataset_settings: DatasetSettings | None = None,
) -> tuple[RunConfig, RunConfig]:
    """:func:`benchmark.config.resolve_config` with the protocols' own-key check (see above)."""
    return resolve_config(
        protocol_data, budget_overrides, user_overrides, dataset_settings, check_protocol_only_keys
    )


def _discover_others(missing: str) -> None:
    """Import the declarations of the protocol files' kinds other than ``missing`` (for an error)."""
    names, _ = scan_protocols()
    for name in names:
        try:
            kind = protocol_kind(load_protocol_file(name))
            if kind != missing and kind not in PROTOCOLS.names():
                _discover(kind)
        except ConfigError:
            continue  # its own error is reported when it is used


def _discover(kind: str) -> None:
    """Import the declaration of ``kind``: the built-in module, else an installed entry point."""
    module = f"{__package__}.{kind}"
    if kind.isidentifier() and importlib.util.find_spec(module) is not None:
        importlib.import_module(module)  # registers itself
        if kind in PROTOCOLS.names():
            return
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name != kind:
            continue
        try:
            spec = ep.load()
        except Exception as exc:  # a plugin's import error is the user's to fix, not a traceback
            raise ConfigError(
                f"Protocol plugin {ep.value!r} ({ENTRY_POINT_GROUP}) failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(spec, ProtocolSpec) or spec.name != kind:
            raise ConfigError(
                f"Protocol plugin {ep.value!r} ({ENTRY_POINT_GROUP}) must name a ProtocolSpec with "
                f"name {kind!r}, got {spec!r}."
            )
        register_protocol(spec)
        return
