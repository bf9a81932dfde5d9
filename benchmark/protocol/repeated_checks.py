"""The torch-free checks of the protocols without a search (``traditional``, ``cbir``).

Their declarations (:mod:`benchmark.protocol.traditional`, :mod:`benchmark.protocol.cbir`) name
:func:`check_repeated_config` (cbir adds its own) as ``ProtocolSpec.check_config``: ``dmlbench run``
makes them before importing torch, the run class's ``resolve`` again
(:mod:`benchmark.protocol.repeated`), so the early answer and the run cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from benchmark.config import RunConfig
from benchmark.errors import ConfigError

if TYPE_CHECKING:
    from benchmark.protocol.request import RunRequest

#: Config sections a protocol without search does not read; setting them is an error, not a no-op.
UNUSED_PREFIXES = ("search.", "space.")


def unused_override(keys: Iterable[str]) -> str | None:
    """The first of ``keys`` (dotted ``--set`` keys) that a protocol without search ignores, or None."""
    for key in keys:
        if key.startswith(UNUSED_PREFIXES) or key in ("search", "space"):
            return key
    return None


def check_repeated_request(request: RunRequest) -> None:
    """Refuse options of ``request`` that a protocol without search would silently ignore."""
    bad = unused_override(sorted(request.overrides))
    if bad is not None:
        raise ConfigError(
            f"Config key {bad!r} is not used by protocol {request.protocol!r}: it has no hyperparameter "
            "search (loss hyperparameters are the loss defaults; fix one with --set loss.NAME=VALUE)."
        )
    if request.sampler is not None:
        raise ConfigError(f"--sampler is not used by protocol {request.protocol!r}: it has no search.")
    if request.workers != 1 or request.storage is not None:
        raise ConfigError(f"--workers/--storage share a search; protocol {request.protocol!r} has none.")
    if request.jobs > 1:
        raise ConfigError(
            f"--jobs runs MLRC folds in parallel; protocol {request.protocol!r} trains its repetitions "
            f"one after another in this process (got --jobs {request.jobs}; leave it out or pass 1)."
        )


def check_repeated_config(c: RunConfig, request: RunRequest | None = None) -> None:
    """The checks every protocol without search makes: the ``request``'s options (when given,
    :func:`check_repeated_request`), then iterations per epoch >= 0, one fold, no frozen trunk."""
    if request is not None:
        check_repeated_request(request)
    if c.train.iters_per_epoch < 0:
        raise ConfigError(
            f"train.iters_per_epoch must be >= 0 (0 = one pass over the training images), "
            f"got {c.train.iters_per_epoch}."
        )
    if c.protocol.n_folds != 1:
        raise ConfigError(
            f"protocol.n_folds must be 1 for protocol {c.protocol.name!r} (one fixed split), "
            f"got {c.protocol.n_folds}."
        )
    if c.model.frozen_trunk:
        raise ConfigError(
            f"model.frozen_trunk = true is only supported by the mlrc protocol, not {c.protocol.name!r}."
        )
