"""The ``traditional`` protocol's run code: the class split, one rep's training and its evaluation.

The protocol's choices (split, AdamW, selection on test, reps) and its settings are described
and declared in :mod:`benchmark.protocol.traditional`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.data.base import ImageDataset
from benchmark.errors import TrainingDiverged
from benchmark.metrics import evaluate
from benchmark.protocol.repeated import RepeatedRun
from benchmark.protocol.seeds import derive_seed
from benchmark.protocol.traditional import half_split, traditional_param_lr
from benchmark.protocol.train import build_fold_model, embed_samples, train_with_loss


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
        lr = traditional_param_lr(self.loss_spec.name, self.loss_spec.has_parameters, self.config.train.lr)
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
            "code": result.code,
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
