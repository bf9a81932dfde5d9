"""Training of one regression case with the protocol's own code (config, data, split, fold training,
metrics): nothing here re-implements training, so a change there shows up in the numbers."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.budgets import BUDGETS
from benchmark.config import NEUTRAL_DEFAULTS, RunConfig, config_to_dict, is_neutral, load_protocol_file
from benchmark.data.base import ImageDataset
from benchmark.data.splits import mlrc_split
from benchmark.engine.parallel import FoldData
from benchmark.engine.seeds import derive_seed
from benchmark.engine.train import embed, train_fold
from benchmark.errors import DataError, DmlbenchError, TrainingDiverged
from benchmark.losses import LOSSES
from benchmark.metrics import evaluate
from benchmark.protocol.registry import resolve_run_config
from benchmark.protocol.run_data import AUGMENTS, fold_data, load_run_dataset
from benchmark.regress.cases import Case, Settings

# The metrics a case produces, in display order.
METRIC_NAMES = ("val_map_at_r", "test_map_at_r")


@dataclass(frozen=True)
class PreparedCase:
    """A case's resolved configuration and data, built once and trained for one or more seeds."""

    case: Case
    config: RunConfig
    params: dict[str, float]
    data: FoldData
    data_fingerprint: str

    def identity(self, settings: Settings) -> dict[str, Any]:
        """What must match between a baseline and a check for their numbers to be comparable."""
        identity = {
            "config": comparable_config(self.config),
            "params": self.params,
            "fold": settings.fold,
            # The tolerance rule too: a changed rule must regenerate the stored tolerances.
            "seeds": list(settings.seeds),
            "check_seeds": settings.n_check_seeds,
            "tolerance_quantile": settings.tolerance_quantile,
            "tolerance_floor": settings.tolerance_floor,
        }
        identity["hash"] = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
        return identity


#: Config sections a regression case never reads: it trains one fold with the loss's default
#: parameters and measures MAP@R itself (:func:`run_case`), so it neither searches nor retrains for a
#: test stage. Leaving them out of the identity keeps baselines comparable across a budget change
#: there (``mini``'s trial count going from 10 to 20 made every baseline stale, though no case
#: reads it). ``test_a_case_reads_none_of_the_sections_its_identity_leaves_out`` prepares and trains
#: a case with these sections failing on any read.
UNREAD_SECTIONS = ("search", "test")


def comparable_config(config: RunConfig) -> dict[str, Any]:
    """The part of a case's config that must match between a baseline and a check."""
    comparable = config_to_dict(config)
    for section in UNREAD_SECTIONS:
        comparable.pop(section)
    # Where the data lives differs between machines (the CI clone, a laptop); the data's content
    # is compared through its fingerprint instead.
    comparable["data"].pop("data_dir", None)
    # Settings this protocol never reads are not in its config (they are other protocols'
    # [settings]), so another protocol gaining a setting leaves baselines valid.
    for key in NEUTRAL_DEFAULTS:
        section, name = key.split(".")
        if name in comparable.get(section, {}) and is_neutral(key, comparable[section][name]):
            comparable[section].pop(name)
            if not comparable[section]:  # a section added whole (eval) at its neutral values
                comparable.pop(section)
    return comparable


def case_config(case: Case, settings: Settings) -> RunConfig:
    """Protocol file, then the budget, then the suite's and the dataset's overrides and the dataset."""
    user: dict[str, Any] = {**settings.overrides, **case.overrides}
    user["data.dataset"] = case.dataset
    if case.data_dir is not None:
        user["data.data_dir"] = str(case.data_dir)
    config, _ = resolve_run_config(
        load_protocol_file(settings.protocol), BUDGETS.get(settings.budget).overrides, user
    )
    return config


def require_data(case: Case) -> None:
    """A case whose data folder is missing is an error (never a silent skip) saying how to proceed."""
    if case.data_dir is not None and not case.data_dir.exists():
        raise DataError(
            f"Regression case {case.name} needs the {case.dataset} data at {case.data_dir}, which does "
            f"not exist. Pass --data-dir PATH, or leave the dataset out with --datasets (e.g. "
            f"--datasets {_other_hint(case.dataset)})."
        )


def prepare_case(case: Case, settings: Settings, cache: Path) -> PreparedCase:
    """Resolve the config and load the split data; a missing data folder is a DataError naming it."""
    config = case_config(case, settings)
    require_data(case)
    dataset: ImageDataset = load_run_dataset(config, cache)
    data = fold_data(dataset, mlrc_split(dataset.classes().tolist(), config.protocol.n_folds))
    params = {k: float(v) for k, v in LOSSES.get(case.loss).defaults.items()}
    return PreparedCase(case, config, params, data, dataset.fingerprint())


def _other_hint(dataset: str) -> str:
    return "glyphs" if dataset != "glyphs" else "omniglot"


def case_seed(settings: Settings, case: Case, seed: int) -> int:
    """The fold-training seed of a case for a suite seed (a pure function of both)."""
    return derive_seed(seed, "regress", case.dataset, case.loss, settings.fold)


@dataclass(frozen=True)
class CaseRun:
    """One training of a case: its metrics, or why it failed."""

    seed: int
    metrics: Mapping[str, float]
    failure: str | None
    wall_s: float


def run_case(prepared: PreparedCase, settings: Settings, seed: int) -> CaseRun:
    """Train the case's fold model with ``seed`` and measure val and test MAP@R (separated)."""
    t0 = time.perf_counter()
    case, config = prepared.case, prepared.config
    spec = LOSSES.get(case.loss)
    train, val = prepared.data.folds[settings.fold]
    device = torch.device("cpu")
    try:
        result, model = train_fold(
            config=config,
            loss_name=case.loss,
            loss_params=prepared.params,
            train=train,
            val=val,
            augment=AUGMENTS[config.data.augment],
            seed=case_seed(settings, case, seed),
            device=device,
        )
    except TrainingDiverged as exc:
        return CaseRun(seed, {}, f"training diverged: {exc}", time.perf_counter() - t0)
    test_set = prepared.data.test
    if not isinstance(test_set, ImageDataset):  # the suite trains on images (no frozen-trunk features)
        raise DmlbenchError(f"{case.name}: regression cases train on images, not cached features.")
    emb = embed(model, test_set.images, device)
    if not np.isfinite(emb).all():
        return CaseRun(seed, {}, "non-finite test embeddings", time.perf_counter() - t0)
    test = evaluate(emb, test_set.labels, spec.embedding_space, ["map_at_r"])["map_at_r"]
    metrics = {"val_map_at_r": float(result.best_val), "test_map_at_r": float(test)}
    return CaseRun(seed, metrics, None, time.perf_counter() - t0)
