"""Outside code as benchmark components: losses, datasets and trunks from a module, a file or a package.

Three ways in, all ending in the same registries as the built-in components:

- a reference ``MODULE:NAME`` (a module on ``sys.path``; the current directory is searched too) or
  ``PATH.py:NAME`` (a Python file): ``dmlbench run --loss my_loss.py:MyLoss``, or
  :func:`benchmark.api.run`. :func:`load_ref` imports it, checks it and registers it under its
  declared name;
- an entry point of an installed distribution in the group ``dmlbench.losses``,
  ``dmlbench.datasets`` or ``dmlbench.trunks``. The entry point's name is the registry name. It is
  imported only when a registry is asked for that name, or for all its names (``dmlbench list``):
  names are metadata, so runs of built-in components never import plugin code;
- the environment variable ``DMLBENCH_PLUGINS`` (JSON, ``[[kind, reference, directory], ...]``):
  references loaded in every process that asks a registry. :func:`load_ref` appends to it, which is
  how the spawned fold and search worker processes find a ``--loss`` plugin of their parent.

What a reference or an entry point must name:

- a loss: a :class:`~benchmark.losses.base.LossSpec` (exactly what a built-in loss registers), or a
  ``torch.nn.Module`` subclass declaring the same as class attributes: ``defaults`` (every
  hyperparameter with its default, ``param_lr`` too when it has learnable parameters),
  ``search_space`` (name -> ``SearchDim`` or ``(low, high)`` / ``(low, high, "log")``),
  ``pair_based`` (bool), ``embedding_space`` (``"cosine"`` or ``"euclidean"``), and optionally
  ``name`` (default: the class name in lower case), ``display_name``, ``description``,
  ``has_parameters`` (default: whether ``param_lr`` is a default) and ``param_weight_decay``. The class
  is built as ``cls(LossContext(num_classes, embedding_dim), params)`` with every hyperparameter;
- a dataset: a :class:`~benchmark.data.DatasetSpec`; a trunk: a
  :class:`~benchmark.models.specs.TrunkSpec`.

Anything else (a missing attribute, a wrong type, an import error, a name a built-in already has)
is a :class:`~benchmark.errors.ConfigError` naming what is wrong: exit status 2 on the command line.
Where a component came from (:class:`PluginSource`: module, file and its SHA-256, distribution and
version) is kept and written into the run record (``plugins``), so a leaderboard row says which
code produced it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from benchmark.checks import SAFE_NAME
from benchmark.errors import ConfigError, DmlbenchError

if TYPE_CHECKING:
    from benchmark.losses.base import SearchDim
    from benchmark.registry import Registry

__all__ = [
    "ENV_VAR",
    "GROUPS",
    "PluginSource",
    "discover",
    "is_ref",
    "load_ref",
    "record_sources",
    "source_of",
]

#: Entry-point group of each component kind (the kind is the registry's ``kind``).
GROUPS: dict[str, str] = {
    "loss": "dmlbench.losses",
    "dataset": "dmlbench.datasets",
    "trunk": "dmlbench.trunks",
}
#: The module whose import registers every built-in component of a kind (checked for name clashes).
_BUILTINS: dict[str, str] = {
    "loss": "benchmark.losses",
    "dataset": "benchmark.data",
    "trunk": "benchmark.models.specs",
}
#: References loaded in every process that consults a registry (see the module docstring).
ENV_VAR = "DMLBENCH_PLUGINS"


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin component's code came from, as written into run records."""

    kind: str
    name: str
    ref: str
    """The reference or entry point it was loaded from (``module:attr``, ``/path/file.py:attr``)."""
    module: str
    file: str | None
    sha256: str | None
    """SHA-256 of ``file`` when it was loaded (the one file; a package's other modules are not hashed)."""
    distribution: str | None
    version: str | None

    def describe(self) -> str:
        """``my-loss 0.1.0`` for an installed distribution, else the file and the start of its hash."""
        if self.distribution:
            return f"{self.distribution} {self.version}"
        where = Path(self.file).name if self.file else self.module
        return f"{where} sha256:{(self.sha256 or '?')[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_SOURCES: dict[tuple[str, str], PluginSource] = {}
# (kind, canonical reference) -> registered name: loading a reference twice is a no-op.
_LOADED: dict[tuple[str, str], str] = {}
# Kinds whose entry points have all been loaded, and the (kind, name) pairs being loaded now.
_ALL_DISCOVERED: set[str] = set()
_IN_PROGRESS: set[tuple[str, str]] = set()


def is_ref(value: str) -> bool:
    """Whether a component name given by the user is a ``MODULE:NAME`` / ``PATH.py:NAME`` reference."""
    return ":" in value


def source_of(kind: str, name: str) -> PluginSource | None:
    """The plugin source of the registered component ``name`` (None: a built-in)."""
    return _SOURCES.get((kind, name))


def record_sources(components: Mapping[str, str]) -> list[dict[str, Any]]:
    """The sources of those of ``components`` (kind -> registered name) that are plugins."""
    return [s.to_dict() for kind, name in components.items() if (s := source_of(kind, name)) is not None]


def load_ref(kind: str, ref: str) -> str:
    """Import the component named by ``ref`` (``MODULE:NAME`` or ``PATH.py:NAME``), register it, return
    its registry name. Spawned worker processes load it too (through :data:`ENV_VAR`)."""
    _check_kind(kind)
    canonical, directory = _canonical(ref)
    key = (kind, canonical)
    if key in _LOADED:
        return _LOADED[key]
    name = _load_canonical(kind, canonical, directory, shown=ref, find_distribution=True)
    entries = _env_entries()
    if [kind, canonical, directory] not in entries:
        os.environ[ENV_VAR] = json.dumps([*entries, [kind, canonical, directory]])
    return name


def discover(registry: Registry[Any], name: str | None = None) -> None:
    """Register the plugins a registry lookup may need: ``name``'s entry point (None: every entry
    point of the registry's kind) and the references of :data:`ENV_VAR`. Called by the registry."""
    kind = registry.kind
    if kind not in GROUPS or (kind, name or "") in _IN_PROGRESS:
        return
    _IN_PROGRESS.add((kind, name or ""))
    try:
        importlib.import_module(_BUILTINS[kind])  # built-ins first: a plugin may not take their names
        for env_kind, canonical, directory in _env_entries():
            if env_kind == kind and (kind, canonical) not in _LOADED:
                _load_canonical(kind, canonical, directory, shown=canonical, find_distribution=False)
        if kind in _ALL_DISCOVERED:
            return
        for ep in importlib.metadata.entry_points(group=GROUPS[kind]):
            if (name is None or ep.name == name) and (kind, ep.name) not in _SOURCES:
                _load_entry_point(kind, ep)
        if name is None:
            _ALL_DISCOVERED.add(kind)
    finally:
        _IN_PROGRESS.discard((kind, name or ""))


# --- loading ------------------------------------------------------------------------------------


def _check_kind(kind: str) -> None:
    if kind not in GROUPS:
        raise DmlbenchError(f"No plugins of kind {kind!r}; plugin kinds: {', '.join(GROUPS)}.")


def _env_entries() -> list[list[str]]:
    raw = os.environ.get(ENV_VAR, "")
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{ENV_VAR} is not JSON ({exc}); expected [[kind, reference, directory], ...]."
        ) from None
    if not isinstance(entries, list) or not all(
        isinstance(e, list) and len(e) == 3 and all(isinstance(x, str) for x in e) for e in entries
    ):
        raise ConfigError(f"{ENV_VAR} must be a JSON list of [kind, reference, directory] string triples.")
    return entries


def _split(ref: str) -> tuple[str, str]:
    target, _, attr = ref.rpartition(":")
    if not target or not attr or not attr.replace(".", "_").isidentifier():
        raise ConfigError(
            f"Plugin reference {ref!r} must be MODULE:NAME (a module on the Python path) or PATH.py:NAME "
            "(a Python file), NAME being the object the file defines."
        )
    return target, attr


def _is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _canonical(ref: str) -> tuple[str, str]:
    """The reference with an absolute file path, and the directory a module reference is imported from
    (the current one, as ``python -m`` would): the same in a worker process started elsewhere."""
    target, attr = _split(ref)
    if _is_file(target):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"Plugin reference {ref!r}: no such file {str(path)!r}.")
        return f"{path}:{attr}", str(path.parent)
    return ref, os.getcwd()


def _load_canonical(kind: str, canonical: str, directory: str, shown: str, find_distribution: bool) -> str:
    # find_distribution: the installed distribution of a module reference, for the record. Worker
    # processes (which write no record) skip it: importlib.metadata.packages_distributions reads
    # every installed distribution's file list (measured 1.5-1.9 s on the loaded 2-core machine).
    target, attr = _split(canonical)
    dist: tuple[str | None, str | None] = (None, None)
    if _is_file(target):
        module = _import_file(Path(target), shown)
    else:
        module = _import_module(target, directory, shown)
        if find_distribution:
            dist = _distribution_of(target)
    obj = _attribute(module, attr, shown)
    file = getattr(module, "__file__", None)
    name = _register(kind, obj, shown)
    _SOURCES[(kind, name)] = PluginSource(
        kind, name, canonical, module.__name__, file, _sha256(file), dist[0], dist[1]
    )
    _LOADED[(kind, canonical)] = name
    return name


def _load_entry_point(kind: str, ep: importlib.metadata.EntryPoint) -> None:
    dist = ep.dist
    shown = f"entry point {ep.name!r} = {ep.value!r} of {dist.name if dist else 'an unknown distribution'}"
    try:
        obj = ep.load()
    except SystemExit as exc:
        raise _exited(shown, exc) from None
    except Exception as exc:
        raise ConfigError(
            f"Plugin {shown} ({GROUPS[kind]}) failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    module = sys.modules.get(ep.module)
    file = getattr(module, "__file__", None)
    name = _register(kind, obj, shown, expected_name=ep.name)
    _SOURCES[(kind, name)] = PluginSource(
        kind,
        name,
        ep.value,
        ep.module,
        file,
        _sha256(file),
        dist.name if dist else None,
        dist.version if dist else None,
    )


def _import_file(path: Path, shown: str) -> ModuleType:
    # One module name per file path: the same file loaded twice is one module.
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    mod_name = f"dmlbench_plugin_{stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"Plugin {shown!r}: {str(path)!r} cannot be imported as a Python file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[mod_name]
        raise _exited(shown, exc) from None
    except Exception as exc:
        del sys.modules[mod_name]
        raise ConfigError(f"Plugin {shown!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _import_module(target: str, directory: str, shown: str) -> ModuleType:
    if directory and directory not in sys.path:
        sys.path.insert(0, directory)  # `--loss my_loss:MyLoss` next to my_loss.py, as with python -m
    try:
        return importlib.import_module(target)
    except SystemExit as exc:
        raise _exited(shown, exc) from None
    except Exception as exc:
        raise ConfigError(f"Plugin {shown!r} failed to import: {type(exc).__name__}: {exc}") from exc


def _exited(shown: str, exc: SystemExit) -> ConfigError:
    """A plugin that called ``sys.exit`` while being imported: an error naming it, not a silent exit."""
    return ConfigError(
        f"Plugin {shown!r} called sys.exit({exc.code!r}) while being imported; a plugin module must "
        'only define its components (run its script code under `if __name__ == "__main__":`).'
    )


def _attribute(module: ModuleType, attr: str, shown: str) -> object:
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            defined = sorted(n for n in vars(module) if not n.startswith("_"))
            raise ConfigError(
                f"Plugin {shown!r}: {module.__name__} has no attribute {attr!r} "
                f"(it defines: {', '.join(defined) or 'nothing public'})."
            )
        obj = getattr(obj, part)
    return obj


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    """The installed distribution providing top-level package of ``module``, if any."""
    names = importlib.metadata.packages_distributions().get(module.partition(".")[0], [])
    if not names:
        return None, None
    return names[0], importlib.metadata.version(names[0])


def _sha256(file: str | None) -> str | None:
    if not file or not Path(file).is_file():
        return None
    return hashlib.sha256(Path(file).read_bytes()).hexdigest()


# --- checking and registering -------------------------------------------------------------------


def _register(kind: str, obj: object, shown: str, expected_name: str | None = None) -> str:
    importlib.import_module(_BUILTINS[kind])
    registry, spec = _SPEC_OF[kind](obj, shown)
    name = str(spec.name)
    if expected_name is not None and name != expected_name:
        raise ConfigError(
            f"Plugin {shown}: the entry point is named {expected_name!r} but the {kind} it names is "
            f"called {name!r}; the two must be the same."
        )
    if name in registry:
        other = _SOURCES.get((kind, name))
        if other is None:
            raise ConfigError(
                f"Plugin {shown!r} declares the {kind} {name!r}, which is the name of a built-in {kind}; "
                "choose another name."
            )
        raise ConfigError(
            f"Plugin {shown!r} declares the {kind} {name!r}, which plugin {other.ref!r} "
            f"({other.describe()}) already registered; choose another name."
        )
    if not SAFE_NAME.fullmatch(name) or ".." in name:
        # The name becomes part of run-directory and record paths: it must stay one path component.
        raise ConfigError(
            f"Plugin {shown!r}: {kind} name {name!r} is not a valid name: it is used in file paths, so "
            "it must be 1-100 of the characters A-Z a-z 0-9 _ - + . (not starting with '.', '-' or "
            "'+', no '..')."
        )
    registry.register(name, spec)
    return name


def _loss_spec(obj: object, shown: str) -> tuple[Registry[Any], Any]:
    from benchmark.losses.base import LOSSES, PARAM_LR, LossSpec

    if isinstance(obj, LossSpec):
        _check_loss_fields(obj.defaults, obj.search_space, obj.pair_based, obj.embedding_space, shown)
        return LOSSES, obj
    if not isinstance(obj, type):
        raise ConfigError(
            f"Plugin {shown!r} is a {type(obj).__name__}; a loss plugin must be a LossSpec or a "
            "torch.nn.Module subclass declaring defaults, search_space, pair_based and embedding_space."
        )
    required = ("defaults", "search_space", "pair_based", "embedding_space")
    missing = [a for a in required if not hasattr(obj, a)]
    if missing:
        raise ConfigError(
            f"Plugin {shown!r}: the loss class {obj.__name__} does not declare "
            f"{', '.join(missing)} (a loss class declares {', '.join(required)} as class attributes)."
        )
    import torch

    if not issubclass(obj, torch.nn.Module):
        raise ConfigError(f"Plugin {shown!r}: the loss class {obj.__name__} must subclass torch.nn.Module.")
    defaults, raw_space = obj.defaults, obj.search_space  # type: ignore[attr-defined]
    if not isinstance(raw_space, Mapping):
        raise ConfigError(f"Plugin {shown!r}: search_space must be a dict, got {type(raw_space).__name__}.")
    space = {str(k): _search_dim(v, f"{shown}: search_space[{k!r}]") for k, v in raw_space.items()}
    _check_loss_fields(defaults, space, obj.pair_based, obj.embedding_space, shown)  # type: ignore[attr-defined]
    has_parameters = getattr(obj, "has_parameters", PARAM_LR in defaults)
    weight_decay = getattr(obj, "param_weight_decay", 1e-4)
    for attr, value, typ in (
        ("has_parameters", has_parameters, bool),
        ("param_weight_decay", weight_decay, float),
        ("name", getattr(obj, "name", ""), str),
        ("display_name", getattr(obj, "display_name", ""), str),
        ("description", getattr(obj, "description", ""), str),
    ):
        if not isinstance(value, typ) or (typ is float and isinstance(value, bool)):
            raise ConfigError(f"Plugin {shown!r}: {attr} must be a {typ.__name__}, got {value!r}.")
    cls: Callable[..., Any] = obj
    try:
        spec = LossSpec(
            name=getattr(obj, "name", obj.__name__.lower()),
            display_name=getattr(obj, "display_name", obj.__name__),
            factory=lambda ctx, params: cls(ctx, params),
            defaults={str(k): float(v) for k, v in defaults.items()},
            search_space=space,
            pair_based=obj.pair_based,  # type: ignore[attr-defined]
            has_parameters=has_parameters,
            embedding_space=obj.embedding_space,  # type: ignore[attr-defined]
            param_weight_decay=float(weight_decay),
            description=getattr(obj, "description", ""),
        )
    except DmlbenchError as exc:
        raise ConfigError(f"Plugin {shown!r}: {exc}") from exc
    return LOSSES, spec


def _check_loss_fields(
    defaults: object, space: object, pair_based: object, embedding: object, shown: str
) -> None:
    if not isinstance(defaults, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for k, v in defaults.items()
    ):
        raise ConfigError(f"Plugin {shown!r}: defaults must be a dict of hyperparameter name -> number.")
    from benchmark.losses.base import SearchDim

    if not isinstance(space, Mapping) or not all(isinstance(d, SearchDim) for d in space.values()):
        raise ConfigError(f"Plugin {shown!r}: search_space must be a dict of name -> SearchDim.")
    if not isinstance(pair_based, bool):
        raise ConfigError(f"Plugin {shown!r}: pair_based must be True or False, got {pair_based!r}.")
    if embedding not in ("cosine", "euclidean"):
        raise ConfigError(
            f"Plugin {shown!r}: embedding_space must be 'cosine' or 'euclidean', got {embedding!r}."
        )


def _search_dim(value: object, where: str) -> SearchDim:
    from benchmark.losses.base import SearchDim

    if isinstance(value, SearchDim):
        return value
    if isinstance(value, tuple | list) and len(value) in (2, 3):
        low, high, *scale = value
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in (low, high)) and scale in (
            [],
            ["log"],
            ["linear"],
        ):
            try:
                return SearchDim(float(low), float(high), log=scale == ["log"])
            except ValueError as exc:
                raise ConfigError(f"Plugin {where}: {exc}") from exc
    raise ConfigError(
        f"Plugin {where} must be a SearchDim or (low, high) or (low, high, 'log'), got {value!r}."
    )


def _dataset_spec(obj: object, shown: str) -> tuple[Registry[Any], Any]:
    from benchmark.data import DATASETS, DatasetSpec

    if not isinstance(obj, DatasetSpec):
        raise ConfigError(
            f"Plugin {shown!r} is a {type(obj).__name__}; a dataset plugin must be a DatasetSpec."
        )
    if not callable(obj.load) or not isinstance(obj.requires_data_dir, bool):
        raise ConfigError(f"Plugin {shown!r}: DatasetSpec.load must be callable, requires_data_dir a bool.")
    return DATASETS, obj


def _trunk_spec(obj: object, shown: str) -> tuple[Registry[Any], Any]:
    from benchmark.models.specs import TRUNKS, TrunkSpec

    if not isinstance(obj, TrunkSpec):
        raise ConfigError(f"Plugin {shown!r} is a {type(obj).__name__}; a trunk plugin must be a TrunkSpec.")
    if not callable(obj.build):
        raise ConfigError(
            f"Plugin {shown!r}: TrunkSpec.build must be callable (in_channels -> (module, dim))."
        )
    return TRUNKS, obj


_SPEC_OF: dict[str, Callable[[object, str], tuple[Registry[Any], Any]]] = {
    "loss": _loss_spec,
    "dataset": _dataset_spec,
    "trunk": _trunk_spec,
}
