"""The ``cbir`` protocol's run code: the closed-set split, one rep's training, brute-force and
two-stage retrieval scores.

The protocol's choices (split, Adam, no selection, metrics, timing) and its settings are described
and declared in :mod:`benchmark.protocol.cbir`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from torch import nn

from benchmark.data.base import ImageDataset
from benchmark.data.closed_set import closed_set_split
from benchmark.engine.seeds import derive_seed
from benchmark.engine.train import build_fold_model, embed_samples, train_with_loss
from benchmark.errors import ConfigError, TrainingDiverged
from benchmark.metrics.knn import Space
from benchmark.metrics.retrieval import nanmean
from benchmark.metrics.two_stage import (
    MAX_KEY_ENTRIES,
    ClassAnchors,
    TwoStageIndex,
    anchors_from_loss,
    brute_force_scores,
    list_hits,
    num_relevant_in_database,
    prepare,
    rank_keys,
    score_hits,
)
from benchmark.protocol.cbir import CBIRSettings, cbir_cutoffs
from benchmark.protocol.registry import protocol_spec
from benchmark.protocol.repeated import RepeatedRun
from benchmark.records import RecordExtras


def loss_anchors(loss: nn.Module, class_ids: np.ndarray) -> ClassAnchors | None:
    """The class anchors of a trained loss module, or None when it has none (pair-based losses)."""
    try:
        return anchors_from_loss(loss, class_ids)
    except ConfigError:
        return None


def brute_force_ranking(queries: np.ndarray, prepared_database: np.ndarray, space: Space) -> np.ndarray:
    """The full ranking (Q, N) of the (already prepared) database for every query, ties by index."""
    q = prepare(queries, space)
    out = np.empty((len(q), len(prepared_database)), dtype=np.int64)
    block = max(1, MAX_KEY_ENTRIES // max(len(prepared_database), 1))
    for start in range(0, len(q), block):
        keys = rank_keys(q[start : start + block], prepared_database, space)
        out[start : start + block] = np.argsort(keys, axis=1, kind="stable")
    return out


def score_retrieval(
    queries: np.ndarray,
    query_labels: np.ndarray,
    database: np.ndarray,
    database_labels: np.ndarray,
    space: Space,
    metrics: list[str],
    anchors: ClassAnchors | None,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """``({mode: {metric: value}}, extras)``: brute force always, two-stage when ``anchors`` exist.

    ``extras`` holds ``brute_force_ms_per_query`` and, with anchors, ``two_stage_ms_per_query``,
    ``speedup`` (brute / two-stage time) and ``stage1_accuracy``.
    """
    ks = cbir_cutoffs(metrics)
    brute = brute_force_scores(queries, query_labels, database, database_labels, space, ks)
    scores = {"brute_force": {m: nanmean(brute[m]) for m in metrics}}
    prepared = prepare(database, space)
    t0 = time.perf_counter()
    brute_force_ranking(queries, prepared, space)
    extras = {"brute_force_ms_per_query": 1000.0 * (time.perf_counter() - t0) / max(len(queries), 1)}
    if anchors is not None:
        two = TwoStageIndex.build(database, database_labels, anchors, space)
        t0 = time.perf_counter()
        result = two.search(queries)
        extras["two_stage_ms_per_query"] = 1000.0 * (time.perf_counter() - t0) / max(len(queries), 1)
        r = num_relevant_in_database(query_labels, database_labels)
        hits = list_hits(query_labels, result.neighbours, database_labels)
        values = score_hits(hits, r, len(database), ks)
        scores["two_stage"] = {m: values[m] for m in metrics}
        extras["stage1_accuracy"] = float(np.mean(result.predicted_class == query_labels))
        extras["speedup"] = extras["brute_force_ms_per_query"] / max(extras["two_stage_ms_per_query"], 1e-12)
    return scores, extras


class CBIRRun(RepeatedRun):
    """One (dataset, loss, budget, seed) run of the closed-set cbir protocol."""

    MODES = (("brute_force", "Brute force"), ("two_stage", "Two-stage"))
    EVAL_LABEL = "query"
    OPTIMIZER = "adam"
    SELECTION = "none (the model after the last epoch)"
    SAMPLING = "pass"

    def split_settings(self) -> CBIRSettings:
        """The split's settings: the running protocol's own when they are (or extend)
        :class:`CBIRSettings`, else cbir's defaults (a plugin protocol on this class whose settings
        have no such keys runs cbir's split; setting them is refused when its config is resolved)."""
        settings = protocol_spec(self.config.protocol.name).settings_of(self.config)
        return settings if isinstance(settings, CBIRSettings) else CBIRSettings()

    def split(self) -> None:
        p = self.split_settings()
        s = closed_set_split(self.dataset.labels, seed=p.split_seed, query_fraction=p.query_fraction)
        self.database_set: ImageDataset = self.dataset.take(s.database)
        self.query_set: ImageDataset = self.dataset.take(s.queries)
        self.split_info = {
            "split": "closed set: a seeded share of each class's images are queries, the rest the database",
            "query_fraction": p.query_fraction,
            "split_seed": p.split_seed,
            "split_fingerprint": s.fingerprint(),
            "n_database_images": len(s.database),
            "n_query_images": len(s.queries),
        }

    def run_rep(self, r: int) -> dict[str, Any]:
        seed = derive_seed(self.request.seed, "cbir", r)
        # eval_every = max_epochs: the single "validation" is of the final model, so nothing is selected.
        result, model, loss_fn = train_with_loss(
            config=self.config,
            loss_name=self.loss_spec.name,
            loss_params=self.params,
            train=self.database_set,
            val=self.query_set,
            augment=self.augment,
            seed=seed,
            device=self.device,
            on_epoch=self.on_epoch_status(r),
            on_step=self.step_status(f"rep {r + 1}/{self.config.test.reps}"),
            optimizer=self.OPTIMIZER,
            sampling=self.SAMPLING,
            # Nothing is selected: an untrained candidate would be a selection on the queries.
            validate_untrained=False,
        )
        db = embed_samples(model, self.database_set, self.device)
        q = embed_samples(model, self.query_set, self.device)
        if not (np.isfinite(db).all() and np.isfinite(q).all()):
            raise TrainingDiverged(f"rep {r}: the trained model produced non-finite embeddings.")
        anchors = loss_anchors(loss_fn, np.unique(self.database_set.labels))
        scores, extras = score_retrieval(
            q,
            self.query_set.labels,
            db,
            self.database_set.labels,
            self.loss_spec.embedding_space,
            list(self.config.test.metrics),
            anchors,
        )
        return {
            "rep": r,
            "seed": seed,
            "scores": scores,
            "retrieval": extras,
            "epochs": result.epochs,
            # Always "max_epochs": eval_every >= max_epochs leaves one validation, after the last
            # epoch, so patience can never fire (no selection on the queries, by design).
            "stopped_by": result.stopped_by,
            "code": result.code,
            "n_anchors": None if anchors is None else len(anchors.classes),
        }

    def evaluate_untrained(self) -> dict[str, dict[str, float]]:
        model = build_fold_model(self.config, self.query_set, derive_seed(self.request.seed, "untrained"))
        model = model.to(self.device)
        db = embed_samples(model, self.database_set, self.device)
        q = embed_samples(model, self.query_set, self.device)
        scores, _ = score_retrieval(
            q,
            self.query_set.labels,
            db,
            self.database_set.labels,
            self.loss_spec.embedding_space,
            list(self.config.test.metrics),
            None,
        )
        return scores

    def extra_per_rep(self) -> dict[str, list[float]]:
        keys = ("brute_force_ms_per_query", "two_stage_ms_per_query", "speedup", "stage1_accuracy")
        return {
            k: [float(rep["retrieval"][k]) for rep in self.rep_results]
            for k in keys
            if all(k in rep["retrieval"] for rep in self.rep_results)
        }

    def record_extras(self) -> RecordExtras:
        return {"two_stage": "two_stage" in self.rep_results[0]["scores"] if self.rep_results else False}

    def notes(self) -> list[str]:
        return [
            "Closed-set retrieval: queries are held-out images of the training classes, the database "
            "is the training images; two-stage = nearest class anchor, then that class's items only "
            "(losses with class anchors)."
        ]

    def training_set_size(self) -> int:
        return len(self.database_set.labels)

    def describe_rep(self, rep: dict[str, Any]) -> str:
        parts = [f"brute-force mAP {rep['scores']['brute_force'].get('map', float('nan')):.4f}"]
        if "two_stage" in rep["scores"]:
            parts.append(
                f"two-stage mAP {rep['scores']['two_stage'].get('map', float('nan')):.4f} "
                f"({rep['retrieval']['speedup']:.1f}x faster)"
            )
        return ", ".join(parts)
