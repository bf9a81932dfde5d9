"""One generic registry type; each component kind (losses, datasets, ...) owns an instance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from benchmark.errors import DmlbenchError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> component mapping where duplicate and unknown names are errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name``; registering a name twice raises."""
        if name in self._items:
            raise DmlbenchError(f"Duplicate {self.kind} name {name!r}: it is already registered.")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        """Return the component called ``name`` or raise an error listing the valid names.

        A name not registered yet may be a plugin's (:mod:`benchmark.plugins`): loaded on this miss.
        """
        if name not in self._items:
            _discover_plugins(self, name)
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        """Registered names in registration order (installed plugins included)."""
        _discover_plugins(self, None)
        return list(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        _discover_plugins(self, None)
        return iter(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)


def _discover_plugins(registry: Registry[Any], name: str | None) -> None:
    from benchmark.plugins import discover  # imported on use: plugins imports the component modules

    discover(registry, name)
