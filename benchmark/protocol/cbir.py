"""The ``cbir`` protocol's declaration and its torch-free parts (Class-Anchor-Margin paper;
docs/protocols.md §2.5 and §4.3): closed-set retrieval.

The run code is :mod:`benchmark.protocol.cbir_run`. Choices, each recorded in the run record:

* **Split**: :func:`~benchmark.data.closed_set.closed_set_split` with ``settings.query_fraction``
  of each class's images as queries (a quarter by default) and ``settings.split_seed`` (0),
  independent of the run seed, so every loss, seed and rep is scored on the same database and
  queries (:class:`CBIRSettings`, the ``[settings]`` block of protocols/cbir.toml).
* **Training**: on the database (= training) images, loss defaults (no search; ``--set loss.X``
  fixes others), Adam (``train.lr``, ``train.weight_decay``), an epoch = one pass over the
  training images, class-based losses with plain random batches, pair-based with m = 4 per class.
  No model selection: with ``eval_every = max_epochs`` the model after the last epoch is scored
  (the paper's patience needs a validation split it does not describe).
* **Metrics**: brute force over the whole database (exact, ties by database index): mAP, P@20,
  P@100 (``test.metrics`` may name ``map`` and ``precision_at_K``). For losses with class anchors
  (:func:`~benchmark.metrics.two_stage.anchors_from_loss`: proxies, mean fields, CAM anchors,
  classifier weights) also two-stage retrieval (nearest anchor, then that class's database items
  by label) with the same metrics, stage-1 accuracy and time per query against brute force's.
  Timing: wall clock of ranking all queries, per query, in ms; database preparation and grouping
  excluded. Brute force is timed with the same numpy key computation and stable sort that stage 2
  uses (:func:`brute_force_ranking`), so the ratio measures the saved comparisons, not a
  difference between libraries. Times depend on the machine's load; they are recorded per rep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmark.config import RunConfig
from benchmark.errors import ConfigError
from benchmark.lazy import lazy_callable
from benchmark.protocol.registry import ProtocolSpec, register_protocol
from benchmark.protocol.repeated_checks import check_repeated_config

if TYPE_CHECKING:
    from benchmark.protocol.request import RunRequest

# Budget overrides (protocols.md §2.5, Class-Anchor-Margin paper): Adam lr 1e-3 from scratch is
# kept; the small CNN on 28 px replaces ResNet-50 and fewer epochs (always trained to the end,
# eval_every = max_epochs) and repetitions are run.
_CPU: dict[str, Any] = {
    "data.image_size": 28,
    "data.augment": "characters",
    "model.trunk": "smallcnn",
}
_MINI: dict[str, Any] = {
    **_CPU,
    "train.batch_size": 128,
    "train.max_epochs": 8,
    "train.eval_every": 8,
    "test.reps": 3,
}
_SMOKE: dict[str, Any] = {
    **_MINI,
    "data.max_classes": 100,
    "data.max_per_class": 8,
    "train.max_epochs": 2,
    "train.eval_every": 2,
    "test.reps": 2,
}


@dataclass(frozen=True)
class CBIRSettings:
    """The cbir protocol's own settings: the ``[settings]`` block of its files, ``--set settings.KEY=V``."""

    #: The share of each class's images that become queries (the rest is the database).
    query_fraction: float = 0.25
    #: The seed of that split. Not the run's --seed on purpose: every loss and every run seed is
    #: scored on the same queries, as with a dataset's official split.
    split_seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.query_fraction < 1.0:
            raise ConfigError(f"settings.query_fraction must lie in (0, 1), got {self.query_fraction!r}.")
        if self.split_seed < 0:
            raise ConfigError(f"settings.split_seed must be >= 0, got {self.split_seed}.")


def check_cbir_config(c: RunConfig, request: RunRequest | None = None) -> None:
    """cbir's own checks (torch-free; ``dmlbench run`` makes them before importing torch): those of
    every protocol without search, then metrics it can score and no model selection on the queries
    (the split's settings are checked by :class:`CBIRSettings` when the config is resolved)."""
    check_repeated_config(c, request)
    cbir_cutoffs(list(c.test.metrics))
    if c.train.eval_every < c.train.max_epochs:
        # Scoring earlier epochs could only select on the queries: the test data.
        raise ConfigError(
            f"train.eval_every ({c.train.eval_every}) must be >= train.max_epochs "
            f"({c.train.max_epochs}) in the cbir protocol: no model selection on the queries."
        )


PROTOCOL = register_protocol(
    ProtocolSpec(
        "cbir",
        lazy_callable("benchmark.protocol.cbir_run:CBIRRun"),
        budget_overrides={"mini": _MINI, "smoke": _SMOKE},
        settings=CBIRSettings,
        check_config=check_cbir_config,
    )
)


_PRECISION = re.compile(r"^precision_at_(\d+)$")


def cbir_cutoffs(metrics: list[str]) -> list[int]:
    """The k of every ``precision_at_k`` in ``metrics``; a ConfigError for a metric cbir cannot score."""
    ks = []
    for m in metrics:
        match = _PRECISION.match(m)
        if match:
            ks.append(int(match.group(1)))
        elif m != "map":
            raise ConfigError(
                f"test.metrics: {m!r} is not a query-vs-database metric; the cbir protocol scores "
                "'map' and 'precision_at_K' (e.g. precision_at_20, precision_at_100)."
            )
    return ks
