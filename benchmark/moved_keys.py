"""Config keys that moved out of the closed configuration into a protocol's ``[settings]`` block.

Until issue 29 the built-in ``cbir`` and ``traditional`` protocols kept their own settings in
:class:`benchmark.config.RunConfig` (``protocol.query_fraction``, ``train.warmup_epochs``, ...),
so every other protocol's config carried them at a neutral value it never read. They are now
settings those protocols declare (``ProtocolSpec.settings``), as a plugin protocol does. This
table is the history of that move, for two readers:

* the config parser: an old spelling (``--set protocol.query_fraction=0.5``, a protocol file's
  ``[train] warmup_epochs``) is an error that says where the key went (:func:`moved_key_message`),
  not a bare "unknown key";
* the record readers: records written before the move hold the old layout;
  :func:`current_layout` gives their config as a run now writes it, so that old and new records of
  one configuration are replicates of one row.

It names two protocols because it records where their keys went; adding a protocol never touches it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MovedKey:
    """Where a former ``RunConfig`` key lives now."""

    #: The protocol kind whose setting it is.
    protocol: str
    #: Its name in that protocol's ``[settings]`` block.
    setting: str
    #: Its former default: the value every other protocol's config held (it did nothing there).
    neutral: Any


#: Former dotted key -> where it lives now.
MOVED_KEYS: Mapping[str, MovedKey] = {
    "protocol.query_fraction": MovedKey("cbir", "query_fraction", 0.25),
    "protocol.split_seed": MovedKey("cbir", "split_seed", 0),
    "protocol.train_classes": MovedKey("traditional", "train_classes", 0),
    "train.warmup_epochs": MovedKey("traditional", "warmup_epochs", 0),
    "train.lr_decay_step": MovedKey("traditional", "lr_decay_step", 0),
    "train.lr_decay_gamma": MovedKey("traditional", "lr_decay_gamma", 1.0),
    "train.clip_grad_value": MovedKey("traditional", "clip_grad_value", 0.0),
}


def moved_key_message(key: str) -> str | None:
    """The error for the former dotted key ``key`` (None: ``key`` did not move)."""
    moved = MOVED_KEYS.get(key)
    if moved is None:
        return None
    new = f"settings.{moved.setting}"
    return (
        f"Config key {key!r} is now {new!r} of the {moved.protocol!r} protocol: set it in the "
        f"[settings] table of its protocol file, or with --set {new}=VALUE and --protocol "
        f"{moved.protocol}. Other protocols have no such setting."
    )


def current_layout(config: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``config`` mapping in the layout runs write now (a copy; ``config`` is unchanged).

    A former key of the record's own protocol (``config.protocol.name``) moves into ``settings``;
    one of another protocol is dropped while it holds its neutral value (the only value it could
    have there, or one that changed nothing) and kept otherwise, so that a config that really
    differed stays different. A config in the current layout is returned as it is.
    """
    out = copy.deepcopy(dict(config))
    section = out.get("protocol")
    kind = section.get("name") if isinstance(section, Mapping) else None
    for key, moved in MOVED_KEYS.items():
        name, field = key.split(".")
        table = out.get(name)
        if not isinstance(table, dict) or field not in table:
            continue
        if moved.protocol == kind:
            settings = out.setdefault("settings", {})
            if isinstance(settings, dict):
                settings.setdefault(moved.setting, table.pop(field))
        elif table[field] == moved.neutral:
            del table[field]
    return out
