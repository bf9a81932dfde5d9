"""Lazily imported callables and modules, so that declarations stay importable without torch.

Registries (losses, datasets, trunks) declare their components with everything ``dmlbench list``
shows, but the code that builds a component imports torch, PML, PIL or faiss. A spec therefore
holds its factory as ``lazy_callable("package.module:attr")``: an ordinary callable that imports
``package.module`` on its first call. ``dmlbench --help``, ``dmlbench list`` and argument errors
then never pay for importing torch (seconds on a loaded machine).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def resolve_target(target: str) -> Any:
    """The object named ``"package.module:attr"`` (``attr`` may be dotted), its module imported now."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"A lazy target is written 'package.module:attr', got {target!r}.")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class LazyCallable:
    """A callable named ``"package.module:attr"``, imported on its first call and then cached.

    It can stand wherever a plain function is expected (a spec's ``factory``, ``load`` or
    ``build`` field): calling it calls the target with the same arguments.
    """

    def __init__(self, target: str) -> None:
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"A lazy target is written 'package.module:attr', got {target!r}.")
        self.target = target
        self._resolved: Any = None

    def resolve(self) -> Any:
        """The target object (its module is imported on the first call)."""
        if self._resolved is None:
            obj = resolve_target(self.target)
            if not callable(obj):
                raise TypeError(f"Lazy target {self.target!r} is not callable.")
            self._resolved = obj
        return self._resolved

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy_callable({self.target!r})"

    def __reduce__(self) -> tuple[type[LazyCallable], tuple[str]]:
        # Pickled by name (specs travel to worker processes); the target is re-imported there.
        return (LazyCallable, (self.target,))


def lazy_callable(target: str) -> Any:
    """A :class:`LazyCallable` for ``"package.module:attr"``.

    Typed ``Any`` so that it fits any ``Callable[...]`` field of a spec without a cast.
    """
    return LazyCallable(target)


class LazyModule(ModuleType):
    """A module object that imports the real module on first attribute access.

    Attribute reads *and writes* (e.g. a test's ``monkeypatch.setattr``) go to the real module.
    ``loader`` imports and returns it, so a module with an import-time check (faiss) keeps it.
    """

    def __init__(self, name: str, loader: Any) -> None:
        super().__init__(name)
        object.__setattr__(self, "_lazy_loader", loader)
        object.__setattr__(self, "_lazy_module", None)

    def _load(self) -> ModuleType:
        module = object.__getattribute__(self, "_lazy_module")
        if module is None:
            module = object.__getattribute__(self, "_lazy_loader")()
            object.__setattr__(self, "_lazy_module", module)
        return module  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._load(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._load(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._load(), name)
