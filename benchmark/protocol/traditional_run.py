"""The ``traditional`` protocol's run code: the class split, one rep's training and its evaluation.

The protocol's choices (split, AdamW, selection on test, reps) and its settings are described
and declared in :mod:`benchmark.protocol.traditional`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
from torch import nn

from benchmark.data import DatasetOptions
from benchmark.data.base import ImageDataset
from benchmark.data.standard import PARTITIONS, LazyImageDataset, load_partitions
from benchmark.engine.seeds import derive_seed
from benchmark.engine.train import build_fold_model, embed_samples, train_with_loss
from benchmark.engine.training_options import LoopOptions
from benchmark.errors import ConfigError, DataError, TrainingDiverged
from benchmark.metrics import evaluate, evaluate_query_gallery
from benchmark.metrics.knn import knn_search
from benchmark.protocol.registry import protocol_spec
from benchmark.protocol.repeated import RepeatedRun
from benchmark.protocol.run_data import cache_dir
from benchmark.protocol.traditional import TraditionalSettings, half_split, traditional_param_lr

#: The official partitions that make a dataset's test a query -> gallery retrieval (In-Shop).
QUERY_GALLERY = ("train", "query", "gallery")


def has_query_gallery(dataset: str) -> bool:
    """Whether ``dataset`` has official train/query/gallery partitions (In-Shop), which the
    traditional protocol uses instead of a class split, as the Mean-Field authors' code does."""
    return set(QUERY_GALLERY) <= set(PARTITIONS.get(dataset, ()))


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
        lr = traditional_param_lr(self.loss_spec, self.config.train.lr)
        if lr is not None and "param_lr" not in self.fixed_params:
            params["param_lr"] = lr
        return params

    #: In-Shop's query images (None: a class split, whose test images are queries and gallery).
    query_set: ImageDataset | None = None

    def settings(self) -> TraditionalSettings:
        """The protocol's own settings: the running protocol's when they are (or extend)
        :class:`TraditionalSettings`, else the defaults (a half/half split, MLRC's loop) for a
        plugin protocol on this class whose settings have no such keys (setting them is refused
        when its config is resolved)."""
        settings = protocol_spec(self.config.protocol.name).settings_of(self.config)
        return settings if isinstance(settings, TraditionalSettings) else TraditionalSettings()

    def loop_options(self) -> LoopOptions:
        """The authors' loop options, from the settings, for the engine."""
        s = self.settings()
        return LoopOptions(s.warmup_epochs, s.lr_decay_step, s.lr_decay_gamma, s.clip_grad_value)

    def split(self) -> None:
        if has_query_gallery(self.config.data.dataset):
            self.split_query_gallery()
            return
        train_classes = self.settings().train_classes
        self.halves = half_split(self.dataset.classes().tolist(), train_classes)
        self.train_set: ImageDataset = self.dataset.subset(list(self.halves.train))
        self.test_set: ImageDataset = self.dataset.subset(list(self.halves.test))
        self.split_info = {
            "split": (
                f"first {train_classes} sorted class ids / the rest"
                if train_classes > 0
                else "half/half of sorted class ids"
            ),
            "n_train_classes": len(self.halves.train),
            "n_test_classes": len(self.halves.test),
            "n_train_images": len(self.train_set.labels),
            "n_test_images": len(self.test_set.labels),
            "test_classes_first_last": [self.halves.test[0], self.halves.test[-1]],
        }

    def split_query_gallery(self) -> None:
        """The dataset's official partitions: train on ``train``, retrieve ``query`` among
        ``gallery`` (In-Shop's list_eval_partition.txt; mft-in-dml's Inshop_Dataset), restricted
        to the images ``data.max_classes``/``data.max_per_class`` keep."""
        c = self.config
        name = c.data.dataset
        cut = self.settings().train_classes
        if cut > 0:
            raise ConfigError(
                f"settings.train_classes = {cut} cuts the sorted classes, but dataset "
                f"{name!r} is split by its official train/query/gallery partitions; set it to 0."
            )
        options = DatasetOptions(
            data_dir=Path(c.data.data_dir) if c.data.data_dir else None,
            image_size=c.data.image_size,
            cache_dir=cache_dir(),
        )
        kept = set(getattr(self.dataset, "paths", ()))
        parts: dict[str, LazyImageDataset] = {}
        for part, data in load_partitions(name, options).items():
            if not isinstance(data, LazyImageDataset):
                raise DataError(f"Dataset {name!r}: partition {part!r} is not a file-based dataset.")
            parts[part] = data.take([i for i, path in enumerate(data.paths) if path in kept])
        train, query, gallery = (parts[p] for p in QUERY_GALLERY)
        train_classes = np.unique(train.labels)
        in_gallery = np.isin(query.labels, gallery.labels)
        if len(train_classes) < 2 or not in_gallery.any():
            raise DataError(
                f"Dataset {name!r}: its official partitions leave {len(train_classes)} training classes and "
                f"{int(in_gallery.sum())} query images with a gallery match (after data.max_classes = "
                f"{c.data.max_classes}, data.max_per_class = {c.data.max_per_class}); the traditional "
                "protocol needs at least 2 and 1."
            )
        # LazyImageDataset duck-types ImageDataset for the trainer, as every photo dataset that
        # load_run_dataset returns does (its loaders are typed ImageDataset for the same reason).
        self.train_set = cast(ImageDataset, train)
        self.query_set = cast(ImageDataset, query)
        self.test_set = cast(ImageDataset, gallery)
        test_classes = np.union1d(np.unique(query.labels), np.unique(gallery.labels)).tolist()
        self.split_info = {
            "split": f"official {name} train / query / gallery partitions (list_eval_partition.txt)",
            "retrieval": "query -> gallery",
            "n_train_classes": len(train_classes),
            "n_test_classes": len(test_classes),
            "n_train_images": len(train.labels),
            "n_query_images": len(query.labels),
            "n_gallery_images": len(gallery.labels),
            "test_classes_first_last": [int(test_classes[0]), int(test_classes[-1])],
        }

    def score(self, model: nn.Module, metrics: list[str]) -> dict[str, float]:
        """The test metrics of ``model``: its test images against each other, or In-Shop's
        queries against its gallery."""
        space = self.loss_spec.embedding_space
        if self.query_set is None:
            emb = embed_samples(model, self.test_set, self.device)
            if not np.isfinite(emb).all():
                raise TrainingDiverged("the model produced non-finite test embeddings")
            return evaluate(emb, self.test_set.labels, space, metrics, search=knn_search(self.config.eval))
        queries = embed_samples(model, self.query_set, self.device)
        gallery = embed_samples(model, self.test_set, self.device)
        if not (np.isfinite(queries).all() and np.isfinite(gallery).all()):
            raise TrainingDiverged("the model produced non-finite query or gallery embeddings")
        return evaluate_query_gallery(
            queries,
            self.query_set.labels,
            gallery,
            self.test_set.labels,
            space,
            metrics,
            search=knn_search(self.config.eval),
        )

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
            # In-Shop: the epoch is selected on query -> gallery MAP@R, as the authors' code does.
            val_score=None if self.query_set is None else self.query_gallery_map_at_r,
            # The authors' loop (st-tech/mft-in-dml code/train.py) first evaluates after training
            # epoch 0 and starts its best at 0: the untrained model is never a candidate.
            validate_untrained=False,
            # Warm-up, lr decay and gradient clipping: the authors' loop (the protocol's settings).
            loop=self.loop_options(),
        )
        try:
            scores = self.score(model, list(self.config.test.metrics))
        except TrainingDiverged as exc:
            raise TrainingDiverged(f"rep {r}: {exc}") from exc
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

    def query_gallery_map_at_r(self, model: nn.Module) -> float:
        """In-Shop's early-stopping score: MAP@R of the queries against the gallery."""
        return self.score(model, ["map_at_r"])["map_at_r"]

    def evaluate_untrained(self) -> dict[str, dict[str, float]]:
        model = build_fold_model(self.config, self.test_set, derive_seed(self.request.seed, "untrained"))
        return {"test": self.score(model.to(self.device), list(self.config.test.metrics))}

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
