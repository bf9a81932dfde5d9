"""The protocol registry: what each protocol kind declares, importable without torch.

A protocol is a TOML file (``protocols/<name>.toml``, its paper numbers) whose ``[protocol] name``
is its *kind*, and one module that declares the kind: ``benchmark/protocol/<kind>.py`` for the
built-in ones (``mlrc``, ``traditional``, ``cbir``, declared here as ``"module:attr"``
placeholders), or an installed distribution's entry point in the group ``dmlbench.protocols``
naming a :class:`ProtocolSpec` (both resolved on first use by
:class:`benchmark.registry.Registry`). The declaration holds what the torch-free layers need
(budget overrides, the protocol's own settings, for ``dmlbench list``, ``--help`` and config
validation) and names its run code lazily
(:func:`benchmark.lazy.lazy_callable`), as the loss registry does. Neither ``budgets.py`` nor
``config.py`` names any protocol: adding one touches its TOML file and its module only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmark.config import (
    DatasetSettings,
    RunConfig,
    build_section,
    load_protocol_file,
    protocol_kind,
    protocol_path,
    resolve_config,
    scan_protocols,
)
from benchmark.errors import ConfigError, UnknownNameError
from benchmark.lazy import LazyCallable
from benchmark.records import BUILTIN_PROTOCOL_KINDS, RecordKind, register_record_kind
from benchmark.registry import Registry

#: Entry-point group of protocols declared by installed distributions (the name is the kind).
ENTRY_POINT_GROUP = "dmlbench.protocols"
#: The built-in protocol kinds, each ``PROTOCOL`` of its declaration module (one list, shared with
#: the record kinds).
BUILTIN_KINDS = BUILTIN_PROTOCOL_KINDS


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
    #: The protocol's own settings: a frozen dataclass whose fields (with defaults) are the keys of
    #: the ``[settings]`` table of its files and ``--set settings.KEY=V`` (None: it has none). Checked
    #: strictly when the config is resolved, before torch is imported; the run reads them with
    #: :meth:`settings_of`.
    settings: type | None = None
    #: The record kind this protocol writes is its name; these are the (mode, label) column groups
    #: its records may leave out of ``test.modes`` (None: every record names its modes).
    record_modes: tuple[tuple[str, str], ...] | None = None
    #: The protocol's own checks of a resolved config and the request (a
    #: :class:`~benchmark.protocol.request.RunRequest`), needing neither torch nor the data: raise
    #: :class:`~benchmark.errors.ConfigError` naming the key. ``dmlbench run`` calls it before torch
    #: is imported, the run class's ``resolve`` again (None: the protocol has none).
    check_config: Callable[[RunConfig, Any], None] | None = None

    def overrides_for(self, budget: str, default: Mapping[str, Any]) -> Mapping[str, Any]:
        """The overrides budget ``budget`` applies to this protocol (``default``: the budget's own)."""
        return self.budget_overrides.get(budget, default)

    def settings_of(self, config: RunConfig) -> Any:
        """The protocol's settings in ``config`` as its ``settings`` dataclass (None: it has none).

        An unknown key or a wrong type is a ConfigError naming ``settings.KEY``; settings given to
        a protocol that declares none are an error naming them.
        """
        if self.settings is None:
            if config.settings:
                raise ConfigError(
                    f"Protocol {self.name!r} has no settings of its own, but the config sets "
                    f"{', '.join('settings.' + k for k in sorted(config.settings))}."
                )
            return None
        return build_section(self.settings, config.settings, "settings")

    def check(self, config: RunConfig, request: Any) -> None:
        """Run :attr:`check_config` on ``config`` and ``request`` (a ConfigError if it is no callable)."""
        if self.check_config is None:
            return
        if not callable(self.check_config):  # a plugin's ProtocolSpec: a TypeError traceback otherwise
            raise ConfigError(
                f"Protocol {self.name!r}: ProtocolSpec.check_config must be None or callable "
                f"(config, request -> None), got {self.check_config!r}."
            )
        self.check_config(config, request)

    def runner_class(self) -> Any:
        """The run class (its module imported now: torch and the rest of the run code)."""
        return self.runner.resolve() if isinstance(self.runner, LazyCallable) else self.runner


def adopt_protocol(obj: object, shown: str) -> ProtocolSpec:
    """What a protocol plugin names, checked: a :class:`ProtocolSpec` (else a ConfigError)."""
    if not isinstance(obj, ProtocolSpec):
        raise ConfigError(
            f"Protocol plugin {shown} ({ENTRY_POINT_GROUP}) must name a ProtocolSpec, got {obj!r}."
        )
    return obj


PROTOCOLS: Registry[ProtocolSpec] = Registry("protocol kind", group=ENTRY_POINT_GROUP, adopt=adopt_protocol)
for _kind in BUILTIN_KINDS:
    PROTOCOLS.register_lazy(_kind, f"benchmark.protocol.{_kind}:PROTOCOL")


def register_protocol(spec: ProtocolSpec) -> ProtocolSpec:
    """Add a protocol kind, and the kind of the records it writes (a declaration module calls this
    when it is imported)."""
    register_record_kind(RecordKind(spec.name, spec.record_modes))
    return PROTOCOLS.register(spec.name, spec)


def protocol_spec(kind: str) -> ProtocolSpec:
    """The declaration of protocol kind ``kind``, imported on first use (an unknown kind names the known)."""
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


def setting_names(spec: ProtocolSpec) -> tuple[str, ...]:
    """The keys of the ``[settings]`` block protocol ``spec`` declares (empty: it has none)."""
    if spec.settings is None or not dataclasses.is_dataclass(spec.settings):
        return ()
    return tuple(f.name for f in dataclasses.fields(spec.settings))


def check_setting_owners(config: RunConfig, spec: ProtocolSpec) -> None:
    """Refuse a ``settings.KEY`` that ``spec`` does not declare but another protocol does, naming
    that protocol (it would otherwise read as a typo; a key no protocol declares is left to
    :meth:`ProtocolSpec.settings_of`, which names the valid keys)."""
    own = setting_names(spec)
    for key in sorted(config.settings):
        if key in own:
            continue
        owners = [s.name for s in protocol_specs() if s.name != spec.name and key in setting_names(s)]
        if owners:
            theirs = ", ".join(repr(o) for o in owners)
            mine = ", ".join(f"settings.{k}" for k in own) or "none"
            raise ConfigError(
                f"settings.{key} = {config.settings[key]!r} is a setting of the {theirs} protocol, but "
                f"this run's protocol is {spec.name!r} (its settings: {mine}). Remove the setting or "
                f"use --protocol {owners[0]}."
            )


def resolve_run_config(
    protocol_data: Mapping[str, Any],
    budget_overrides: Mapping[str, Any],
    user_overrides: Mapping[str, Any],
    dataset_settings: DatasetSettings | None = None,
) -> tuple[RunConfig, RunConfig]:
    """:func:`benchmark.config.resolve_config`, then the protocol's own settings validated against
    its declaration, their defaults filled in (so that the record names every one of them and a
    changed one is a deviation); a setting of another protocol is an error naming its owner."""
    resolved, paper = resolve_config(protocol_data, budget_overrides, user_overrides, dataset_settings)
    spec = protocol_spec(resolved.protocol.name)
    return _with_settings(resolved, spec), _with_settings(paper, spec)


def _with_settings(config: RunConfig, spec: ProtocolSpec) -> RunConfig:
    check_setting_owners(config, spec)
    settings = spec.settings_of(config)
    if settings is None:
        return config
    return dataclasses.replace(config, settings=_settings_table(settings))


def _settings_table(settings: Any) -> dict[str, Any]:
    # As the table stands in a config dict (JSON-friendly: tuples become lists).
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(settings).items()}
