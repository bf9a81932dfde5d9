"""The ``mlrc`` protocol's run code: data, 4-fold split, search, test stage, untrained row, record.

resolve -> load data -> split -> prepare run dir -> search -> test stage -> untrained row ->
record (:class:`~benchmark.protocol.base.ProtocolRun` runs the steps). The search is
:class:`~benchmark.protocol.search_stage.SearchStage`, given this run's fold executor; the
declaration (budgets, settings) is :mod:`benchmark.protocol.mlrc`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.analysis.convergence import convergence_summary
from benchmark.config import RunConfig
from benchmark.data.base import ImageDataset
from benchmark.data.splits import MLRCSplit, check_queries_have_positives, mlrc_split
from benchmark.engine.device import default_jobs
from benchmark.engine.environment import environment_info
from benchmark.engine.evaluation import evaluate_folds, interval_dict
from benchmark.engine.parallel import FoldExecutor, FoldTask, WorkerSetup
from benchmark.engine.seeds import derive_seed
from benchmark.engine.train import EpochCallback, StepCallback, build_fold_model, embed_samples
from benchmark.engine.workers import run_local_workers
from benchmark.errors import DmlbenchError
from benchmark.faults import kill_point
from benchmark.io import atomic_write, read_json, write_json_atomic
from benchmark.metrics.knn import knn_search
from benchmark.models.features import FeatureDataset, load_or_compute_features
from benchmark.protocol.base import ProtocolRun
from benchmark.protocol.request import COMMON_POSITIVE, RunRequest, positive_counts, validate_common
from benchmark.protocol.run_data import cache_dir, fold_data, load_fold_data, load_run_dataset
from benchmark.protocol.run_files import fold_result_files, rep_result_file
from benchmark.protocol.search_stage import SearchStage, shared_reps, study_identity, study_name
from benchmark.protocol.space import space_document
from benchmark.records import RunRecordDoc
from benchmark.search.storage import is_database_url, redact_url


class MLRCRun(ProtocolRun):
    """One (dataset, protocol, loss, budget, seed) run of the MLRC protocol."""

    LEADERBOARD_PLOTS = True

    # -- step 1 ---------------------------------------------------------------------------------
    def _validate_names(self, c: RunConfig) -> None:
        # MLRC's own checks are its declaration's (mlrc.check_mlrc_config), made by resolve.
        validate_common(c, positive_counts(c, COMMON_POSITIVE))

    # -- step 2/3 -------------------------------------------------------------------------------
    def load_data(self) -> None:
        self.dataset: ImageDataset = load_run_dataset(self.config, cache_dir())
        # Frozen trunk: one feature matrix for every fold, trial and rep (computed or from the cache).
        self.features: FeatureDataset | None = None
        self.features_path: Path | None = None
        if self.config.model.frozen_trunk:
            trunk_seed = derive_seed(self.request.seed, "frozen_trunk")
            self.features, self.features_path, hit = load_or_compute_features(
                self.dataset,
                self.config,
                cache_dir(),
                trunk_seed,
                self.device,
                on_batch=lambda done, n: self.progress.heartbeat(f"frozen trunk: features {done}/{n} images"),
            )
            self.progress.message(
                f"frozen trunk: {'cached' if hit else 'computed'} features "
                f"{tuple(self.features.features.shape)} at {self.features_path}"
            )

    def split(self) -> None:
        self.splits: MLRCSplit = mlrc_split(self.dataset.classes().tolist(), self.config.protocol.n_folds)
        eval_sets = {"test": self.splits.test}
        eval_sets.update({f"fold {i} validation": f.val for i, f in enumerate(self.splits.folds)})
        check_queries_have_positives(self.dataset.labels, eval_sets, self.config.data.dataset)
        data = fold_data(self.dataset if self.features is None else self.features, self.splits)
        self.test_set, self.fold_sets = data.test, data.folds
        jobs = self.request.jobs if self.request.jobs > 0 else default_jobs(self.device)
        threads = 1 if jobs > 1 else torch.get_num_threads()
        setup = WorkerSetup(self.config, self.loss_spec.name, self.augment, str(self.device), threads)
        loader = functools.partial(load_fold_data, self.config, cache_dir(), self.features_path)
        self.executor = FoldExecutor(setup, data, loader, jobs)
        self.jobs = jobs
        self.progress.parallel = jobs

    # -- step 5 ---------------------------------------------------------------------------------
    def execute(self) -> None:
        """The search, then the test stage and the untrained row; fold workers stop on any exit."""
        try:
            with self.watch.time("search"):
                self.search()
            with self.watch.time("test"):
                self.test_stage()
                self.untrained()
        except BaseException:  # Ctrl-C or an error: stop the fold workers now, then re-raise
            self.executor.close(abort=True)
            raise
        self.executor.close()

    def search(self) -> None:
        """Run search trials until ``search.n_trials`` are counted (see :mod:`.search_stage`)."""
        req = self.request
        stage = SearchStage(
            request=req,
            config=self.config,
            loss=self.loss_spec.name,
            loss_defaults=self.loss_spec.defaults,
            search_space=self.search_space,
            fixed_params=self.fixed_params,
            run_dir=self.run_dir,
            n_folds=len(self.fold_sets),
            progress=self.progress,
            run_folds=self.executor.run,
            step_status=self.step_status,
            start_workers=lambda on_poll: run_local_workers(
                worker_requests(req), search_worker, worker_jobs(req), on_poll
            ),
        )
        self.search_stage = stage
        stage.run()
        self.study, self.storage = stage.study, stage.storage
        if req.worker_id is None:
            self.best, self.best_params = stage.best, stage.best_params

    # -- step 6 ---------------------------------------------------------------------------------
    def test_stage(self) -> None:
        """Retrain with the best parameters ``test.reps`` times and evaluate on the test classes.

        Journal storage: this process runs every rep; finished reps and folds are files in
        ``runs/.../test/`` (resume keeps them). Database storage: the reps are trials of a second
        study ``.../test`` in the same database, each claimed by one process and retried by
        heartbeat if that process dies; a rep's result is stored in its trial, so every process
        can build the record.
        """
        c, req = self.config, self.request
        self.rep_results: list[dict[str, Any]] = []
        n_folds = len(self.fold_sets)
        if is_database_url(req.storage):
            loss = self.loss_spec.name
            self.rep_results = shared_reps(
                self.storage,
                study_name(req, c, loss, "test"),
                {**study_identity(req, c, loss), "best_trial": self.best.number},
                derive_seed(req.seed, "test_study"),
                c.test.reps,
                self._run_rep,
                lambda r: self.progress.skip(n_folds),
            )
            return
        results: dict[int, dict[str, Any]] = {}
        todo = []
        for r in range(c.test.reps):
            rep_path = rep_result_file(self.run_dir, r)
            if rep_path.exists():
                results[r] = read_json(rep_path)
                self.progress.skip(n_folds)
            else:
                todo.append(r)
        for r, rep in self._run_reps(todo):
            write_json_atomic(rep_result_file(self.run_dir, r), rep)
            kill_point(f"test.rep_saved:{r}")
            results[r] = rep
        self.rep_results = [results[r] for r in range(c.test.reps)]

    def _run_rep(self, r: int) -> dict[str, Any]:
        """One test repetition (see :meth:`_run_reps`)."""
        return dict(self._run_reps([r]))[r]

    def _run_reps(self, reps: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Test repetitions ``reps``: 4 fold models each with the best parameters, evaluated on the
        test set; yields (rep, result) as each rep's last fold finishes.

        The folds of all ``reps`` train in one pool (a worker that finishes a rep's fold starts the
        next rep's instead of idling until the rep's slowest fold ends); each fold's seed depends
        on its rep and fold only, so the numbers are those of reps trained one after another.
        Finished folds are files in ``runs/.../test/`` and are reused after an interruption.
        """
        c = self.config
        n_folds = len(self.fold_sets)
        embs: dict[int, dict[int, np.ndarray]] = {r: {} for r in reps}
        infos: dict[int, dict[int, dict[str, object]]] = {r: {} for r in reps}
        tasks = []
        for r in reps:
            for f in range(n_folds):
                emb_path, info_path = fold_result_files(self.run_dir, r, f)
                if emb_path.exists() and info_path.exists():  # finished before an interruption
                    embs[r][f], infos[r][f] = np.load(emb_path), read_json(info_path)
                    self.progress.skip(1)
                else:
                    seed = derive_seed(self.request.seed, "test", r, f)
                    tasks.append(FoldTask(f, self.best_params, seed, embed_test=True, group=r))

        def on_epoch(task: FoldTask) -> EpochCallback:
            def cb(epoch: int, val_map: float, best: float) -> None:
                self.progress.status(
                    f"test rep {task.group + 1}/{c.test.reps} fold {task.fold + 1}/{n_folds} epoch {epoch} "
                    f"val MAP@R {val_map:.4f} (best {best:.4f})"
                )

            return cb

        def on_step(task: FoldTask) -> StepCallback:
            return self.step_status(f"test rep {task.group + 1}/{c.test.reps} fold {task.fold + 1}/{n_folds}")

        # Reps whose folds were all saved before an interruption are evaluated first.
        for r in reps:
            if len(embs[r]) == n_folds:
                yield r, self._rep_result(r, embs[r], infos[r])
        for outcome in self.executor.run(tasks, on_epoch, on_step):
            r, f = outcome.task.group, outcome.task.fold
            if outcome.failure is not None:
                raise DmlbenchError(
                    f"Test-stage retraining diverged (rep {r}, {outcome.failure}) with the best search "
                    f"parameters {self.best_params}."
                )
            assert outcome.result is not None and outcome.test_embeddings is not None
            # The array and at most 128 bytes of .npy header: the size a full disk's error states.
            size = outcome.test_embeddings.nbytes + 128
            emb_path, info_path = fold_result_files(self.run_dir, r, f)
            with atomic_write(emb_path, size) as fh:
                np.save(fh, outcome.test_embeddings)
            write_json_atomic(info_path, outcome.result.to_dict())
            kill_point(f"test.fold_saved:{r}:{f}")
            embs[r][f], infos[r][f] = outcome.test_embeddings, outcome.result.to_dict()
            self.progress.fold_finished(outcome.result.wall_s)
            self.progress.status(
                f"test rep {r + 1}/{c.test.reps}: fold {f + 1}/{n_folds} done", milestone=True
            )
            if len(embs[r]) == n_folds:
                yield r, self._rep_result(r, embs[r], infos[r])

    def _rep_result(
        self, r: int, embs: Mapping[int, np.ndarray], infos: Mapping[int, dict[str, object]]
    ) -> dict[str, Any]:
        """A test repetition's record entry from its fold models' test embeddings."""
        c = self.config
        n_folds = len(self.fold_sets)
        # Reached whatever order the workers finished the folds in (fold_saved names one fold, and
        # which fold is trained last after a resume depends on that order).
        kill_point(f"test.folds_saved:{r}")
        fold_embs = [embs[f] for f in range(n_folds)]
        rep = {"rep": r, "folds": [infos[f] for f in range(n_folds)], **self._evaluate_folds(fold_embs)}
        sep, cat = rep["separated"]["map_at_r"], rep["concatenated"]["map_at_r"]  # type: ignore[index]
        self.progress.status(
            f"test rep {r + 1}/{c.test.reps}: separated MAP@R {sep:.4f}, concatenated {cat:.4f}",
            persistent=True,
        )
        return rep

    def _evaluate_folds(self, fold_embs: list[np.ndarray]) -> dict[str, dict[str, float]]:
        """Separated (mean over fold models) and concatenated metrics on the test classes."""
        return evaluate_folds(
            fold_embs,
            self.test_set.labels,
            self.loss_spec.embedding_space,
            list(self.config.test.metrics),
            knn_search(self.config.eval),
        )

    # -- step 7 ---------------------------------------------------------------------------------
    def untrained(self) -> None:
        """The "Pretrained" row: fold models evaluated before any training (once)."""
        path = self.run_dir / "untrained.json"
        if path.exists():
            self.untrained_result = read_json(path)
            return
        embs = []
        for f in range(len(self.fold_sets)):
            seed = derive_seed(self.request.seed, "untrained", f)
            model = build_fold_model(self.config, self.test_set, seed)
            embs.append(embed_samples(model.to(self.device), self.test_set, self.device))
        self.untrained_result = self._evaluate_folds(embs)
        write_json_atomic(path, self.untrained_result)

    # -- step 8 ---------------------------------------------------------------------------------
    def build_record(self) -> RunRecordDoc:
        c = self.config
        metrics = list(c.test.metrics)
        per_rep = {
            mode: {m: [rep[mode][m] for rep in self.rep_results] for m in metrics}
            for mode in ("separated", "concatenated")
        }
        summary = {
            mode: {m: interval_dict(per_rep[mode][m], c.test.confidence) for m in metrics}
            for mode in ("separated", "concatenated")
        }
        # The ignore below: with a ** item, mypy asks that every optional key come from one; the
        # search-free protocols' keys are not an MLRC record's, convergence is added below, code on writing.
        record: RunRecordDoc = {
            **self.record_header(),  # type: ignore[typeddict-item]
            "data": {
                "dataset_fingerprint": self.dataset.fingerprint(),
                "n_images": len(self.dataset.labels),
                "n_classes": len(self.dataset.classes()),
                "split_fingerprint": self.splits.fingerprint(),
                "n_test_classes": len(self.splits.test),
                "n_test_images": len(self.test_set.labels),
                "folds": [{"train": len(f.train), "val": len(f.val)} for f in self.splits.folds],
                "never_validated": list(self.splits.never_validated),
            },
            "environment": environment_info(self.device),
            "search": {
                "sampler": c.search.sampler,
                "n_trials": c.search.n_trials,
                "space": space_document(self.search_space),
                "fixed": self.fixed_params,
                "best_trial": self.best.number,
                "best_value": self.best.value,
                "best_params": self.best_params,
                "trials": self.search_stage.trial_records(),
            },
            "test": {
                "reps": c.test.reps,
                "metrics": metrics,
                "per_rep": per_rep,
                "summary": summary,
                "rep_details": self.rep_results,
            },
            "untrained": {
                "separated": self.untrained_result["separated"],
                "concatenated": self.untrained_result["concatenated"],
            },
            "timings_s": self.watch.timings,
            "execution": {
                "jobs": self.jobs,
                "device": str(self.device),
                "torch_threads_per_job": self.executor.setup.threads,
                "workers": self.request.workers,
                # Where the study lives: several processes (and machines) may have run its trials.
                "storage": "journal" if self.request.storage is None else redact_url(self.request.storage),
                "study": study_name(self.request, c, self.loss_spec.name),
            },
        }
        if self.search_extended_from is not None:
            # The first trials were trained in another run directory (--extend-search).
            record["execution"]["search_extended_from"] = self.search_extended_from
        # Why each fold training stopped, per stage (docs/protocols.md §2.6): computed from the folds above.
        record["convergence"] = convergence_summary(record)
        return record


def worker_jobs(request: RunRequest) -> int:
    """Fold jobs of each ``--workers`` process: ``--jobs``, else 1 (the workers share the cores)."""
    return request.jobs if request.jobs > 0 else 1


def worker_requests(request: RunRequest) -> list[RunRequest]:
    """The requests of the ``request.workers`` search processes: one worker each, numbered from 1."""
    jobs = worker_jobs(request)
    return [
        dataclasses.replace(request, workers=1, worker_id=k, jobs=jobs, quiet=True)
        for k in range(1, request.workers + 1)
    ]


def search_worker(request: RunRequest) -> None:
    """What one ``--workers`` process runs (:mod:`benchmark.engine.workers`): search trials only."""
    run = MLRCRun(request)
    run.resolve()
    run.load_data()
    run.split()
    run.prepare_run_dir()
    try:
        run.search()
    except BaseException:
        run.executor.close(abort=True)
        raise
    run.executor.close()
