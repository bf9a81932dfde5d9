"""The ``traditional`` protocol (Proxy-Anchor style; Mean-Field DML paper §4.2; docs/protocols.md §2.5).

Choices, each recorded in the run record:

* **Split**: the sorted class ids cut in half; train = the first ``N // 2`` classes, test = the
  rest (an odd class goes to test), or the first ``protocol.train_classes`` when set (SOP declares
  its official 11,318 / 11,316). No validation classes, no cross-validation.
* **Hyperparameters**: the loss's defaults (no search); ``--set loss.X=...`` fixes others. Loss
  parameters (proxies, anchors, β) train with AdamW at lr 1e-2, mean fields (``mf*`` losses) at
  2e-1 (:func:`traditional_param_lr`), unless ``loss.param_lr`` is set.
* **Training**: AdamW (``train.lr``, ``train.weight_decay``) for trunk and embedder; an epoch is
  one pass over the training images (``train.iters_per_epoch = 0``: as many full batches as
  fit in the training set); class-based losses draw plain random batches that cover every image
  once per pass, pair-based ones draw that many batches of m = 4 images per class. The loop is
  the Mean-Field authors' (protocols/traditional.toml, :mod:`benchmark.protocol.training_options`):
  a warm-up epoch training only the embedder and loss parameters, lr halved every 10 epochs,
  gradients clipped at 10, BatchNorm fully frozen, avg+max pooling, kaiming embedder, and
  RandomResizedCrop(224, scale 0.08-1) from the whole image.
* **Selection on test (the classic flaw, labelled)**: after every ``eval_every`` epochs the
  model is scored by MAP@R on the *test* classes; training stops after ``patience`` scores
  without strict improvement and the best-scoring epoch is the model reported. The record says
  ``"selection_on_test": true`` and the leaderboard repeats it under the table.
* **Reps**: ``test.reps`` trainings with seeds derived from the run seed; MAP@R, Recall@k and
  epochs to best are reported as mean and 95% t-interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmark.data.base import ImageDataset
from benchmark.errors import DataError, TrainingDiverged
from benchmark.metrics import evaluate
from benchmark.protocol.repeated import RepeatedRun
from benchmark.protocol.seeds import derive_seed
from benchmark.protocol.train import build_fold_model, embed_samples, train_with_loss

#: AdamW learning rates of the loss's own parameters (docs/protocols.md §2.5).
PROXY_PARAM_LR = 1e-2
MEAN_FIELD_PARAM_LR = 2e-1
#: Losses whose parameters are mean fields (docs/protocols.md §3).
MEAN_FIELD_LOSSES = frozenset({"mfcont", "mfcwms", "mfnca"})


@dataclass(frozen=True)
class HalfSplit:
    """Sorted class ids of the training half and of the test half."""

    train: tuple[int, ...]
    test: tuple[int, ...]


def half_split(classes: Sequence[int], train_classes: int = 0) -> HalfSplit:
    """First half of the sorted class ids for training, second half for testing (odd N: test gets
    the extra class); with ``train_classes`` > 0 the first that many classes train (SOP's official
    11,318). A DataError when either part would have fewer than 2 classes."""
    ids = sorted({int(c) for c in classes})
    if len(ids) < 4:
        raise DataError(
            f"The traditional protocol's half/half class split needs at least 4 classes, got {len(ids)}."
        )
    cut = train_classes if train_classes > 0 else len(ids) // 2
    if not 2 <= cut <= len(ids) - 2:
        raise DataError(
            f"protocol.train_classes = {train_classes} leaves fewer than 2 test or training classes: "
            f"the dataset has {len(ids)} classes (after data.max_classes). Set protocol.train_classes "
            "to a smaller number, or 0 for half of the classes."
        )
    return HalfSplit(tuple(ids[:cut]), tuple(ids[cut:]))


def traditional_param_lr(loss_name: str, has_parameters: bool) -> float | None:
    """The AdamW lr of a loss's own parameters in this protocol; None for a loss without any."""
    if not has_parameters:
        return None
    return MEAN_FIELD_PARAM_LR if loss_name in MEAN_FIELD_LOSSES else PROXY_PARAM_LR


class TraditionalRun(RepeatedRun):
    """One (dataset, loss, budget, seed) run of the traditional protocol."""

    MODES = (("test", "Test"),)
    SELECTION_ON_TEST = True
    EVAL_LABEL = "test"
    OPTIMIZER = "adamw"
    SELECTION = "early stopping on test MAP@R"
    SAMPLING = "pass"

    def loss_params(self) -> dict[str, float]:
        params = super().loss_params()
        lr = traditional_param_lr(self.loss_spec.name, self.loss_spec.has_parameters)
        if lr is not None and "param_lr" not in self.fixed_params:
            params["param_lr"] = lr
        return params

    def split(self) -> None:
        self.halves = half_split(self.dataset.classes().tolist(), self.config.protocol.train_classes)
        self.train_set: ImageDataset = self.dataset.subset(list(self.halves.train))
        self.test_set: ImageDataset = self.dataset.subset(list(self.halves.test))
        self.split_info = {
            "split": (
                f"first {self.config.protocol.train_classes} sorted class ids / the rest"
                if self.config.protocol.train_classes > 0
                else "half/half of sorted class ids"
            ),
            "n_train_classes": len(self.halves.train),
            "n_test_classes": len(self.halves.test),
            "n_train_images": len(self.train_set.labels),
            "n_test_images": len(self.test_set.labels),
            "test_classes_first_last": [self.halves.test[0], self.halves.test[-1]],
        }

    def run_rep(self, r: int) -> dict[str, Any]:
        seed = derive_seed(self.request.seed, "traditional", r)
        result, model, _ = train_with_loss(
            config=self.config,
            loss_name=self.loss_spec.name,
            loss_params=self.params,
            train=self.train_set,
            val=self.test_set,  # the flaw: epochs are selected on the test classes
            augment=self.augment,
            seed=seed,
            device=self.device,
            on_epoch=self.on_epoch_status(r),
            on_step=self.step_status(f"rep {r + 1}/{self.config.test.reps}"),
            optimizer=self.OPTIMIZER,
            sampling=self.SAMPLING,
        )
        emb = embed_samples(model, self.test_set, self.device)
        if not np.isfinite(emb).all():
            raise TrainingDiverged(f"rep {r}: the trained model produced non-finite test embeddings")
        scores = evaluate(
            emb, self.test_set.labels, self.loss_spec.embedding_space, list(self.config.test.metrics)
        )
        return {
            "rep": r,
            "seed": seed,
            "scores": {"test": scores},
            "best_epoch": result.best_epoch,
            "epochs": result.epochs,
            "stopped_by": result.stopped_by,
            "curve": [[e, v] for e, v in result.curve],
        }

    def evaluate_untrained(self) -> dict[str, dict[str, float]]:
        model = build_fold_model(self.config, self.test_set, derive_seed(self.request.seed, "untrained"))
        emb = embed_samples(model.to(self.device), self.test_set, self.device)
        return {
            "test": evaluate(
                emb, self.test_set.labels, self.loss_spec.embedding_space, list(self.config.test.metrics)
            )
        }

    def extra_per_rep(self) -> dict[str, list[float]]:
        return {
            "epochs_to_best": [float(rep["best_epoch"]) for rep in self.rep_results],
            "epochs_run": [float(rep["epochs"]) for rep in self.rep_results],
        }

    def notes(self) -> list[str]:
        return [
            "Selection on test: each rep's epoch is chosen by early stopping on test-class MAP@R "
            "(the traditional protocol's known flaw, reproduced because papers report it); "
            "these numbers are optimistic and not comparable with MLRC's."
        ]

    def training_set_size(self) -> int:
        return len(self.train_set.labels)

    def describe_rep(self, rep: dict[str, Any]) -> str:
        s = rep["scores"]["test"]
        value = s.get("map_at_r", float("nan"))
        return f"test MAP@R {value:.4f}, best epoch {rep['best_epoch']}/{rep['epochs']}"
