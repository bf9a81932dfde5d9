"""One registry type for every component kind, owning lazy loading and plugin discovery.

Each kind (losses, datasets, trunks, metrics, protocols, budgets, ...) owns one instance, in the
module ``registry.py`` of its package. A registry holds, under each name, either the component
itself or a ``"module:attr"`` placeholder (:meth:`Registry.register_lazy`) imported on first use,
and finds outside components in three ways, all resolved on first use and all ending in the same
table as the built-in ones:

- an entry point of an installed distribution in the registry's ``group`` (``dmlbench.losses``,
  ``dmlbench.datasets``, ``dmlbench.trunks``, ``dmlbench.metrics``, ``dmlbench.protocols``). The
  entry point's name is the component's name. It is imported only when the registry is asked
  for that name, or for all its names (``dmlbench list``): runs of built-in components never
  import plugin code;
- a reference ``MODULE:NAME`` (a module on ``sys.path``; the current directory is searched too)
  or ``PATH.py:NAME`` (a Python file), given to :meth:`Registry.load_ref` (``dmlbench run --loss
  my_loss.py:MyLoss``);
- the environment variable ``DMLBENCH_PLUGINS`` (JSON, ``[[kind, reference, directory], ...]``):
  references loaded in every process that asks a registry. :meth:`Registry.load_ref` appends to
  it, which is how spawned fold and search worker processes find a plugin of their parent.

What a plugin names is turned into the registry's item by the registry's ``adopt`` function,
given by the module that owns the registry (a loss class becomes a ``LossSpec``; a wrong type is a
:class:`~benchmark.errors.ConfigError` naming what is wrong). So this module imports no component
module: nothing here runs back up the import graph. An unknown name is an
:class:`~benchmark.errors.UnknownNameError` that lists the valid names and the closest ones.
Where a plugin component came from (:class:`PluginSource`) is kept for the run record.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Generic, TypedDict, TypeVar

from benchmark.checks import SAFE_NAME
from benchmark.errors import ConfigError, DmlbenchError, UnknownNameError
from benchmark.lazy import resolve_target
from benchmark.schema import NEEDED

T = TypeVar("T")

#: References loaded in every process that consults a registry (see the module docstring).
ENV_VAR = "DMLBENCH_PLUGINS"

#: Turns what a plugin names (``obj``; ``shown`` says where it came from, for errors) into an item.
Adopt = Callable[[object, str], T]


class PluginSourceDoc(TypedDict):
    """A :class:`PluginSource` as a run record holds it (an entry of the record's ``plugins``)."""

    # Read by benchmark.records (what a reader requires is declared here: benchmark.schema).
    kind: Annotated[str, NEEDED]
    name: Annotated[str, NEEDED]
    ref: Annotated[str, NEEDED]
    module: Annotated[str, NEEDED]
    file: str | None
    sha256: str | None
    distribution: str | None
    version: str | None


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

    def to_dict(self) -> PluginSourceDoc:
        """As the record holds it, fields in this order (:func:`benchmark.records.parse_plugins` reads it)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "ref": self.ref,
            "module": self.module,
            "file": self.file,
            "sha256": self.sha256,
            "distribution": self.distribution,
            "version": self.version,
        }


@dataclass(frozen=True)
class _Placeholder:
    """A component declared by name as ``"module:attr"``, imported when it is first asked for."""

    target: str


def is_ref(value: str) -> bool:
    """Whether a component name given by the user is a ``MODULE:NAME`` / ``PATH.py:NAME`` reference."""
    return ":" in value


class Registry(Generic[T]):
    """A name -> component mapping where duplicate and unknown names are errors.

    ``group``: the entry-point group of this kind's plugins (None: no plugins). ``adopt``: turns a
    plugin's object into an item (None: the object must already be one; it is taken as it is).
    ``prefixes`` (:meth:`register_prefix`) build items for whole families of names (``timm:NAME``).
    """

    def __init__(self, kind: str, *, group: str | None = None, adopt: Adopt[T] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._adopt = adopt
        self._items: dict[str, T | _Placeholder] = {}
        self._prefixes: dict[str, str] = {}
        self._sources: dict[str, PluginSource] = {}
        # canonical reference -> registered name: loading a reference twice is a no-op.
        self._loaded: dict[str, str] = {}
        self._all_discovered = False
        self._in_progress: set[str] = set()

    # --- declaring ---------------------------------------------------------------------------

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name``; registering a name twice raises.

        A placeholder of ``name`` is replaced (its module registering itself when it is imported).
        """
        if name in self._items and not isinstance(self._items[name], _Placeholder):
            raise DmlbenchError(f"Duplicate {self.kind} name {name!r}: it is already registered.")
        self._items[name] = item
        return item

    def register_lazy(self, name: str, target: str) -> None:
        """Declare ``name`` as the object ``"module:attr"``, imported when ``name`` is first asked for."""
        if name in self._items:
            raise DmlbenchError(f"Duplicate {self.kind} name {name!r}: it is already registered.")
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"A lazy target is written 'package.module:attr', got {target!r}.")
        self._items[name] = _Placeholder(target)

    def register_prefix(self, prefix: str, target: str) -> None:
        """Names starting with ``prefix`` are built by ``"module:attr"`` called as ``(name, rest)``."""
        self._prefixes[prefix] = target

    # --- looking up --------------------------------------------------------------------------

    def get(self, name: str) -> T:
        """Return the component called ``name`` or raise an error listing the valid names.

        A name not registered yet may be a plugin's: its entry point is loaded on this miss.
        """
        for prefix, target in self._prefixes.items():
            if name.startswith(prefix):
                item: T = resolve_target(target)(name, name[len(prefix) :])
                return item
        if name not in self._items:
            self.discover(name)
        if name not in self._items:
            raise UnknownNameError(self.kind, name, self.names())
        return self._resolve(name)

    def names(self) -> list[str]:
        """Registered names in registration order (placeholders and installed plugins included)."""
        self.discover(None)
        return list(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        """Every ``(name, component)``, placeholders imported now."""
        return iter([(name, self._resolve(name)) for name in self.names()])

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is registered, a plugin's entry point of that name loaded on a miss."""
        if isinstance(name, str) and name not in self._items:
            self.discover(name)
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)

    def _resolve(self, name: str) -> T:
        item = self._items[name]
        if isinstance(item, _Placeholder):
            obj = resolve_target(item.target)  # its module may register the name itself
            if isinstance(self._items[name], _Placeholder):
                shown = f"{self.kind} {name!r} = {item.target!r}"
                self._items[name] = self._adopt(obj, shown) if self._adopt is not None else obj
            item = self._items[name]
        return item  # type: ignore[return-value]

    # --- plugins -----------------------------------------------------------------------------

    def source_of(self, name: str) -> PluginSource | None:
        """The plugin source of the registered component ``name`` (None: a built-in)."""
        return self._sources.get(name)

    def load_ref(self, ref: str) -> str:
        """Import the component named by ``ref`` (``MODULE:NAME`` or ``PATH.py:NAME``), register it,
        return its name. Spawned worker processes load it too (through :data:`ENV_VAR`)."""
        self._check_plugins()
        canonical, directory = _canonical(ref)
        if canonical in self._loaded:
            return self._loaded[canonical]
        name = self._load_canonical(canonical, directory, shown=ref, find_distribution=True)
        entries = _env_entries()
        if [self.kind, canonical, directory] not in entries:
            os.environ[ENV_VAR] = json.dumps([*entries, [self.kind, canonical, directory]])
        return name

    def discover(self, name: str | None = None) -> None:
        """Register the plugins a lookup may need: ``name``'s entry point (None: every entry point of
        the group) and this kind's references in :data:`ENV_VAR`."""
        if self.group is None or (name or "") in self._in_progress:
            return
        self._in_progress.add(name or "")
        try:
            for env_kind, canonical, directory in _env_entries():
                if env_kind == self.kind and canonical not in self._loaded:
                    self._load_canonical(canonical, directory, shown=canonical, find_distribution=False)
            if self._all_discovered:
                return
            for ep in importlib.metadata.entry_points(group=self.group):
                if (name is None or ep.name == name) and ep.name not in self._sources:
                    self._load_entry_point(ep)
            if name is None:
                self._all_discovered = True
        finally:
            self._in_progress.discard(name or "")

    def forget_plugins(self) -> None:
        """Drop every plugin component and the discovery state (tests start from the built-ins)."""
        for name in self._sources:
            self._items.pop(name, None)
        self._sources.clear()
        self._loaded.clear()
        self._all_discovered = False

    def _check_plugins(self) -> None:
        if self.group is None:
            raise DmlbenchError(f"The {self.kind} registry takes no plugins.")

    def _load_canonical(self, canonical: str, directory: str, shown: str, find_distribution: bool) -> str:
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
        name = self._register_plugin(obj, shown)
        self._sources[name] = PluginSource(
            self.kind, name, canonical, module.__name__, file, _sha256(file), dist[0], dist[1]
        )
        self._loaded[canonical] = name
        return name

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        dist = ep.dist
        shown = (
            f"entry point {ep.name!r} = {ep.value!r} of {dist.name if dist else 'an unknown distribution'}"
        )
        try:
            obj = ep.load()
        except SystemExit as exc:
            raise _exited(shown, exc) from None
        except Exception as exc:
            raise ConfigError(
                f"Plugin {shown} ({self.group}) failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        module = sys.modules.get(ep.module)
        file = getattr(module, "__file__", None)
        name = self._register_plugin(obj, shown, expected_name=ep.name)
        self._sources[name] = PluginSource(
            self.kind,
            name,
            ep.value,
            ep.module,
            file,
            _sha256(file),
            dist.name if dist else None,
            dist.version if dist else None,
        )

    def _register_plugin(self, obj: object, shown: str, expected_name: str | None = None) -> str:
        item: T = self._adopt(obj, shown) if self._adopt is not None else obj  # type: ignore[assignment]
        name = getattr(item, "name", None)
        if not isinstance(name, str):
            raise ConfigError(f"Plugin {shown!r}: a {self.kind} must have a string name, got {name!r}.")
        if expected_name is not None and name != expected_name:
            raise ConfigError(
                f"Plugin {shown}: the entry point is named {expected_name!r} but the {self.kind} it "
                f"names is called {name!r}; the two must be the same."
            )
        if name in self._items:
            other = self._sources.get(name)
            if other is None:
                raise ConfigError(
                    f"Plugin {shown!r} declares the {self.kind} {name!r}, which is the name of a built-in "
                    f"{self.kind}; choose another name."
                )
            raise ConfigError(
                f"Plugin {shown!r} declares the {self.kind} {name!r}, which plugin {other.ref!r} "
                f"({other.describe()}) already registered; choose another name."
            )
        if not SAFE_NAME.fullmatch(name) or ".." in name:
            # The name becomes part of run-directory and record paths: it must stay one path component.
            raise ConfigError(
                f"Plugin {shown!r}: {self.kind} name {name!r} is not a valid name: it is used in file "
                "paths, so it must be 1-100 of the characters A-Z a-z 0-9 _ - + . (not starting with "
                "'.', '-' or '+', no '..')."
            )
        self._items[name] = item
        return name


def record_sources(
    registries: Mapping[str, Registry[Any]], components: Mapping[str, str]
) -> list[PluginSourceDoc]:
    """The sources of those of ``components`` (kind -> registered name) that are plugins."""
    return [
        s.to_dict()
        for kind, name in components.items()
        if kind in registries and (s := registries[kind].source_of(name)) is not None
    ]


# --- loading ------------------------------------------------------------------------------------


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
