"""The loss registry: what a loss declares and how the trainer builds it.

A loss is registered as a :class:`LossSpec`. The spec carries everything the protocol needs
without instantiating the loss: its hyperparameter defaults, its MLRC search space (docs/protocols.md §3),
whether it is pair-based (sampler with ``m = 4`` images per class) or class/proxy-based
(``m = 1``), whether it owns learnable parameters (proxies, mean fields, anchors, β; the trainer
gives those their own RMSprop with ``lr = param_lr``), and the embedding space used for
retrieval.

Every built loss module has the same call signature::

    loss = build_loss("mfcont", LossContext(num_classes=C, embedding_dim=D), {"m_p": 0.05})
    value = loss(embeddings, labels)   # (B, D) raw embeddings, (B,) labels in 0..C-1 -> scalar

Cosine-space losses normalise the raw embeddings themselves; the euclidean-space loss
(``cam``) uses them as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from benchmark.errors import ConfigError, DmlbenchError
from benchmark.registry import Registry

if TYPE_CHECKING:
    # Only for annotations: the declarations (and `dmlbench list`) must not import torch; factories
    # are lazily imported callables (benchmark.lazy) that import it when a loss is first built.
    import torch

__all__ = [
    "DEFAULT_PARAM_LR",
    "LOSSES",
    "PARAM_LR",
    "PARAM_LR_SEARCH",
    "LossContext",
    "LossFactory",
    "LossSpec",
    "SearchDim",
    "adopt_loss",
    "build_loss",
    "check_integer",
    "check_positive",
    "register_loss",
    "resolve_params",
]

#: Name of the hyperparameter holding the learning rate of a loss's own parameters.
PARAM_LR = "param_lr"

#: Default learning rate of loss parameters (proxies, mean fields, anchors, β).
#:
#: The trainer optimises them with their own RMSprop. RMSprop's step per coordinate is about
#: ``lr`` whatever the gradient scale, so 1e-2 moves a unit-scale (N(0, 1)-initialised) proxy
#: coordinate by ~1 % per iteration: fast enough that proxies keep up with an embedder trained
#: at 1e-6..1e-4 (the usual "proxies at 100x the backbone lr" rule of Proxy-Anchor and the MPA
#: papers, which used 1e-2 with AdamW), slow enough not to oscillate. It is tuned on
#: [1e-6, 1] (log) by the MLRC search anyway; the default matters for fixed-parameter protocols.
DEFAULT_PARAM_LR = 1e-2


@dataclass(frozen=True)
class SearchDim:
    """One dimension of a hyperparameter search space (a closed interval, optionally log scale)."""

    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError(f"SearchDim needs finite low <= high, got [{self.low}, {self.high}].")
        if self.log and self.low <= 0:
            raise ValueError(f"A log-scale SearchDim needs low > 0, got {self.low}.")

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int | float) and self.low <= value <= self.high


#: A linear range with ``high / low`` at least this (``low > 0``) spans two orders of magnitude or
#: more: :func:`log_if_wide` searches it on a log scale under ``search.log_wide_ranges``.
WIDE_RANGE_RATIO = 100.0


def log_if_wide(dim: SearchDim, ratio: float = WIDE_RANGE_RATIO) -> SearchDim:
    """``dim`` on a log scale if it is linear with ``0 < low`` and ``high / low >= ratio``; else
    ``dim`` itself (log ranges, ranges reaching 0 or below, and narrower ones are left as they are)."""
    if dim.log or dim.low <= 0 or dim.high / dim.low < ratio:
        return dim
    return SearchDim(dim.low, dim.high, log=True)


#: The MLRC range of every loss-parameter learning rate (docs/protocols.md §2.2 and §3).
PARAM_LR_SEARCH = SearchDim(1e-6, 1.0, log=True)


@dataclass(frozen=True)
class LossContext:
    """What a loss needs to know about the fold it is trained on."""

    num_classes: int
    """C, the number of training classes of the fold; labels given to ``forward`` are 0..C-1."""
    embedding_dim: int
    """D, the width of the embeddings given to ``forward``."""


LossFactory = Callable[[LossContext, Mapping[str, float]], "torch.nn.Module"]


@dataclass(frozen=True)
class LossSpec:
    """Everything the benchmark knows about a loss before building it."""

    name: str
    display_name: str
    factory: LossFactory
    """Builds the loss module from a context and a *complete* parameter mapping (see
    :func:`resolve_params`)."""
    defaults: Mapping[str, float]
    """Every hyperparameter with its default, including ``param_lr`` when ``has_parameters``."""
    search_space: Mapping[str, SearchDim]
    """The tuned hyperparameters (keys are a subset of ``defaults``): MLRC's Cars196 ranges for the
    losses MLRC ran; the CUB and SOP ranges that differ are those datasets' paper settings
    (benchmark.data.registry.PAPER_SETTINGS, docs/protocols.md §3)."""
    pair_based: bool
    """True: the sampler draws m = 4 images per class; False: m = 1 (class/proxy-based)."""
    has_parameters: bool
    """True: the module has learnable parameters, optimised with RMSprop(lr=param_lr)."""
    embedding_space: Literal["cosine", "euclidean"]
    param_weight_decay: float = 1e-4
    """Weight decay of the loss-parameter optimiser (0 for MarginLoss β, docs/protocols.md §2.2)."""
    param_lr_ratio: float = 100.0
    """Learning rate of the loss's own parameters as a multiple of the model's, where a protocol
    fixes hyperparameters instead of searching ``param_lr`` (``traditional``; the Mean-Field authors'
    ``--lr-ratio``): 100 for proxies, anchors and β (the paper's 1e-2 at lr 1e-4), 2000 for mean
    fields (docs/protocols.md §2.5). Only read when ``has_parameters``."""
    source: Literal["pml", "dmlbench"] = "pml"
    description: str = ""
    """One line for ``dmlbench list losses``."""
    dataset_defaults: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Values the papers state for particular datasets (dataset name -> {hyperparameter: value}),
    e.g. SoftTriple's K = 2 centres without regulariser on SOP. On that dataset they replace the
    defaults and are fixed (not searched); runs record them and do not count them as deviations."""

    def __post_init__(self) -> None:
        # A malformed spec is a programming error in a loss module, caught at import time.
        extra = sorted(set(self.search_space) - set(self.defaults))
        if extra:
            raise DmlbenchError(f"Loss {self.name!r}: search keys {extra} have no default.")
        for dataset, values in self.dataset_defaults.items():
            unknown = sorted(set(values) - set(self.defaults))
            if unknown:
                raise DmlbenchError(
                    f"Loss {self.name!r}: dataset_defaults[{dataset!r}] sets {unknown} without a default."
                )
        if self.has_parameters != (PARAM_LR in self.defaults):
            raise DmlbenchError(
                f"Loss {self.name!r}: {PARAM_LR!r} must be a default exactly when has_parameters."
            )
        if not (math.isfinite(self.param_lr_ratio) and self.param_lr_ratio > 0):
            raise DmlbenchError(f"Loss {self.name!r}: param_lr_ratio must be > 0, got {self.param_lr_ratio}.")
        for key, dim in self.search_space.items():
            if self.defaults[key] not in dim:
                raise DmlbenchError(
                    f"Loss {self.name!r}: default {key}={self.defaults[key]} is outside its "
                    f"search range [{dim.low}, {dim.high}]."
                )

    def defaults_for(self, dataset: str) -> dict[str, float]:
        """The paper's fixed values of this loss on ``dataset`` (empty for most datasets)."""
        return {k: float(v) for k, v in self.dataset_defaults.get(dataset, {}).items()}

    @property
    def m_per_class(self) -> int:
        """Images per class in a batch: 4 for pair-based losses, 1 for class/proxy-based ones."""
        return 4 if self.pair_based else 1


# --- plugins (benchmark.registry): what a loss plugin may name --------------------------------


def adopt_loss(obj: object, shown: str) -> LossSpec:
    """The :class:`LossSpec` of what a loss plugin names: a spec, or a ``torch.nn.Module`` subclass
    declaring the same as class attributes (see docs/guide/plugins.md); else a ConfigError."""
    if isinstance(obj, LossSpec):
        _check_loss_fields(obj.defaults, obj.search_space, obj.pair_based, obj.embedding_space, shown)
        return obj
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
    import torch  # a loss class is a torch module: torch is imported once a plugin class is given

    if not issubclass(obj, torch.nn.Module):
        raise ConfigError(f"Plugin {shown!r}: the loss class {obj.__name__} must subclass torch.nn.Module.")
    defaults, raw_space = obj.defaults, obj.search_space  # type: ignore[attr-defined]
    if not isinstance(raw_space, Mapping):
        raise ConfigError(f"Plugin {shown!r}: search_space must be a dict, got {type(raw_space).__name__}.")
    space = {str(k): _search_dim(v, f"{shown}: search_space[{k!r}]") for k, v in raw_space.items()}
    _check_loss_fields(defaults, space, obj.pair_based, obj.embedding_space, shown)  # type: ignore[attr-defined]
    has_parameters = getattr(obj, "has_parameters", PARAM_LR in defaults)
    weight_decay = getattr(obj, "param_weight_decay", 1e-4)
    lr_ratio = getattr(obj, "param_lr_ratio", 100.0)
    for attr, value, typ in (
        ("has_parameters", has_parameters, bool),
        ("param_weight_decay", weight_decay, float),
        ("param_lr_ratio", lr_ratio, float),
        ("name", getattr(obj, "name", ""), str),
        ("display_name", getattr(obj, "display_name", ""), str),
        ("description", getattr(obj, "description", ""), str),
    ):
        if not isinstance(value, typ) or (typ is float and isinstance(value, bool)):
            raise ConfigError(f"Plugin {shown!r}: {attr} must be a {typ.__name__}, got {value!r}.")
    cls: Callable[..., Any] = obj
    try:
        return LossSpec(
            name=getattr(obj, "name", obj.__name__.lower()),
            display_name=getattr(obj, "display_name", obj.__name__),
            factory=lambda ctx, params: cls(ctx, params),
            defaults={str(k): float(v) for k, v in defaults.items()},
            search_space=space,
            pair_based=obj.pair_based,  # type: ignore[attr-defined]
            has_parameters=has_parameters,
            embedding_space=obj.embedding_space,  # type: ignore[attr-defined]
            param_weight_decay=float(weight_decay),
            param_lr_ratio=float(lr_ratio),
            description=getattr(obj, "description", ""),
        )
    except DmlbenchError as exc:
        raise ConfigError(f"Plugin {shown!r}: {exc}") from exc


def _check_loss_fields(
    defaults: object, space: object, pair_based: object, embedding: object, shown: str
) -> None:
    if not isinstance(defaults, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for k, v in defaults.items()
    ):
        raise ConfigError(f"Plugin {shown!r}: defaults must be a dict of hyperparameter name -> number.")
    if not isinstance(space, Mapping) or not all(isinstance(d, SearchDim) for d in space.values()):
        raise ConfigError(f"Plugin {shown!r}: search_space must be a dict of name -> SearchDim.")
    if not isinstance(pair_based, bool):
        raise ConfigError(f"Plugin {shown!r}: pair_based must be True or False, got {pair_based!r}.")
    if embedding not in ("cosine", "euclidean"):
        raise ConfigError(
            f"Plugin {shown!r}: embedding_space must be 'cosine' or 'euclidean', got {embedding!r}."
        )


def _search_dim(value: object, where: str) -> SearchDim:
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


LOSSES: Registry[LossSpec] = Registry("loss", group="dmlbench.losses", adopt=adopt_loss)


def register_loss(spec: LossSpec) -> LossSpec:
    """Add ``spec`` to :data:`LOSSES` under ``spec.name`` and return it."""
    return LOSSES.register(spec.name, spec)


def resolve_params(spec: LossSpec, overrides: Mapping[str, float]) -> dict[str, float]:
    """Return the spec's defaults updated with ``overrides``, as floats.

    Raises :class:`ConfigError` for a key the loss does not have (naming the valid keys), a
    value that is not a finite real number, or a value <= 0 for a log-scale hyperparameter.
    Values outside the search range are otherwise allowed (fixed-parameter protocols use them);
    the factories reject values the formula cannot take.
    """
    unknown = sorted(set(overrides) - set(spec.defaults))
    if unknown:
        raise ConfigError(
            f"Loss {spec.name!r} has no hyperparameter {', '.join(repr(k) for k in unknown)}. "
            f"Valid keys: {', '.join(spec.defaults)}."
        )
    resolved = dict(spec.defaults)
    for key, value in overrides.items():
        # bool is an int subclass; `margin = true` in a protocol file is a mistake, not 1.0.
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(
                f"Loss {spec.name!r}: hyperparameter {key!r} must be a finite number, got {value!r}."
            )
        dim = spec.search_space.get(key)
        if dim is not None and dim.log and value <= 0:
            # A log-scale hyperparameter (temperature, scale, learning rate) is positive by nature.
            raise ConfigError(f"Loss {spec.name!r}: hyperparameter {key!r} must be > 0, got {value!r}.")
        resolved[key] = float(value)
    return {key: float(value) for key, value in resolved.items()}


def build_loss(name: str, ctx: LossContext, params: Mapping[str, float]) -> torch.nn.Module:
    """Build the registered loss ``name`` for ``ctx`` with ``params`` overriding its defaults."""
    spec = LOSSES.get(name)
    if ctx.num_classes < 1 or ctx.embedding_dim < 1:
        raise ConfigError(
            f"Loss {name!r} needs num_classes >= 1 and embedding_dim >= 1, got "
            f"num_classes={ctx.num_classes}, embedding_dim={ctx.embedding_dim}."
        )
    return spec.factory(ctx, resolve_params(spec, params))


# --- parameter checks shared by the factories -------------------------------------------------


def check_positive(loss: str, params: Mapping[str, float], *keys: str) -> None:
    """Raise :class:`ConfigError` unless every ``params[key]`` is > 0."""
    for key in keys:
        if not params[key] > 0:
            raise ConfigError(f"Loss {loss!r}: {key} must be > 0, got {params[key]}.")


def check_integer(loss: str, params: Mapping[str, float], key: str, minimum: int) -> int:
    """Return ``params[key]`` as an int, raising :class:`ConfigError` unless it is a whole number
    >= ``minimum``."""
    value = params[key]
    if value != int(value) or int(value) < minimum:
        raise ConfigError(f"Loss {loss!r}: {key} must be a whole number >= {minimum}, got {value}.")
    return int(value)
