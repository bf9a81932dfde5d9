"""What a run of a loss searches and what it fixes, resolved from its config without torch; and the
form a run record stores it in (``search.space``, ``search.fixed``).

The runner searches what :func:`search_space` returns; ``benchmarks/regenerate_boards.py`` and
``benchmarks/sensitivity.py`` compare a committed record's ``search`` block with
:func:`search_document` to tell whether the record was made at the ranges today's code would
search (a loss's default ranges are code, not config, so its board settings cannot tell).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.config import RunConfig, config_from_mapping
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.losses import LOSSES, SearchDim, log_if_wide
from benchmark.moved_keys import current_layout
from benchmark.records import ParamRangeDoc, recorded_search


def search_space(config: RunConfig, loss: str) -> tuple[dict[str, SearchDim], dict[str, float]]:
    """``(searched dimensions, fixed hyperparameters)`` of ``loss`` under ``config``: the loss's
    ranges less its fixed parameters, with ``space.<loss>`` overrides, on a log scale where
    ``search.log_wide_ranges`` asks for it. Raises :class:`ConfigError` for an unknown key or a bad
    range in ``loss`` or ``space``."""
    spec = LOSSES.get(loss)
    unknown = sorted(set(config.loss) - set(spec.defaults))
    if unknown:
        raise ConfigError(
            f"Unknown loss.{unknown[0]} for loss {spec.name!r}; its hyperparameters are: "
            f"{', '.join(spec.defaults)}."
        )
    # The paper's values for this dataset (SOP SoftTriple: K = 2, no regulariser) are fixed
    # like the user's --set loss.X, which still wins (and is a recorded deviation).
    fixed = {**spec.defaults_for(config.data.dataset), **config.loss}
    space = {k: d for k, d in spec.search_space.items() if k not in fixed}
    for loss_name, ranges in config.space.items():
        other = LOSSES.get(loss_name)  # an unknown loss name in [space.X] is an error too
        for key, bounds in ranges.items():
            if key not in other.search_space:
                raise ConfigError(
                    f"space.{loss_name}.{key}: {key!r} is not searched for loss {loss_name!r}; "
                    f"its search space is {', '.join(other.search_space)}."
                )
            dim = other.search_space[key]
            if len(bounds) != 2 or not bounds[0] < bounds[1] or (dim.log and bounds[0] <= 0):
                raise ConfigError(
                    f"space.{loss_name}.{key} must be [low, high] with low < high"
                    f"{' and low > 0 (log scale)' if dim.log else ''}, got {list(bounds)}."
                )
            if loss_name == spec.name and key in space:
                space[key] = SearchDim(float(bounds[0]), float(bounds[1]), dim.log)
    if config.search.log_wide_ranges:
        space = {k: log_if_wide(d) for k, d in space.items()}
    return space, fixed


def space_document(space: Mapping[str, SearchDim]) -> dict[str, ParamRangeDoc]:
    """``space`` as a record's ``search.space`` stores it: name -> ``{low, high, log}``."""
    return {k: {"low": d.low, "high": d.high, "log": d.log} for k, d in space.items()}


def search_document(config: RunConfig, loss: str) -> dict[str, Any]:
    """``{"space": ..., "fixed": ...}`` as a run of ``loss`` at ``config`` records them."""
    space, fixed = search_space(config, loss)
    return {"space": space_document(space), "fixed": fixed}


def searches_as_today(document: Mapping[str, Any]) -> bool:
    """Whether a record's ``search`` block is what today's code would search at the record's own
    config (False where that config no longer resolves, or the loss is no longer registered)."""
    loss = document.get("loss")
    config_doc = document.get("config")
    if not isinstance(loss, str) or not isinstance(config_doc, Mapping):
        return False
    try:
        config = config_from_mapping(current_layout(config_doc))
        return recorded_search(document) == search_document(config, loss)
    except DmlbenchError:
        return False
