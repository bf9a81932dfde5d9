"""The MLRC run: a sequence of named steps from configuration to leaderboard.

resolve -> load data -> split -> prepare run dir -> search -> test stage -> untrained row
-> record -> leaderboard. Each step is a small method; all state lives in the run directory, so
re-running the same command after an interruption continues where it stopped.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from optuna.trial import TrialState

from benchmark.config import (
    Deviation,
    RunConfig,
    config_hash,
    config_to_dict,
    describe_schedule,
    deviations,
    resolve_config,
)
from benchmark.data import DatasetOptions, load_dataset
from benchmark.data.augment import CHARACTER_AUGMENT, IMAGENET_AUGMENT, PAPER_AUGMENT, AugmentSpec
from benchmark.data.base import ImageDataset
from benchmark.data.splits import MLRCSplit, check_queries_have_positives, mlrc_split
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.faults import kill_point
from benchmark.io import atomic_write, differing_keys, read_json, write_json_atomic
from benchmark.losses import LOSSES, LossSpec, SearchDim
from benchmark.metrics import evaluate
from benchmark.metrics.knn import use_gpu_search
from benchmark.models.features import FeatureDataset, Samples, load_features, load_or_compute_features
from benchmark.models.pretrained import weights_record
from benchmark.models.trunks import WeightsLookup, lookup_cached_weights, trunk_spec
from benchmark.plugins import record_sources
from benchmark.protocol.convergence import convergence_summary
from benchmark.protocol.environment import environment_info
from benchmark.protocol.parallel import FoldData, FoldExecutor, FoldTask, WorkerSetup
from benchmark.protocol.progress import Progress, Stopwatch
from benchmark.protocol.request import (
    AUGMENT_NAMES,
    check_request,
    dataset_paper_settings,
    request_layers,
    validate_common,
)
from benchmark.protocol.request import RunRequest as RunRequest  # re-exported: its home before
from benchmark.protocol.seeds import derive_seed
from benchmark.protocol.train import EpochCallback, FoldResult, StepCallback, build_fold_model, embed_samples
from benchmark.search.storage import (
    fail_stale,
    heartbeat,
    is_database_url,
    open_shared_study,
    open_storage,
    redact_url,
    repair_torn_journal,
)
from benchmark.search.study import (
    FAILED_SCORE,
    FAILURE_ATTR,
    INTERRUPTIONS_ATTR,
    SURPLUS_ATTR,
    best_trial,
    budget_rank,
    budget_state,
    counted_trials,
    enqueue_startup,
    is_failed,
    is_interrupted,
    is_result,
    make_sampler,
    recover_stale,
    suggest,
    tell_failed,
)
from benchmark.stats import t_interval

RECORD_SCHEMA = "dmlbench.run/1"
# How often a process waiting for other workers' trials polls the shared study.
_POLL_S = 1.0

# Our own progress display says what Optuna's per-trial INFO lines would, in the protocol's terms.
optuna.logging.set_verbosity(optuna.logging.WARNING)

# The names are declared (and validated) in benchmark.protocol.request, without torch.
AUGMENTS: dict[str, AugmentSpec | None] = dict(
    zip(AUGMENT_NAMES, (PAPER_AUGMENT, IMAGENET_AUGMENT, CHARACTER_AUGMENT, None), strict=True)
)


@dataclass
class RunResult:
    record_path: Path
    run_dir: Path
    leaderboard_paths: list[Path]
    record: dict[str, Any]


def cache_dir() -> Path:
    """Where derived data (rendered glyphs, decoded images) is cached between runs."""
    return Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))


def pick_device(name: str) -> torch.device:
    """The torch device for ``--device`` (``auto``: CUDA if present); on CUDA, retrieval metrics
    search with faiss-gpu too when it is installed (recorded as ``environment.faiss_search``)."""
    if name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name} was requested but CUDA is not available on this machine.")
    elif name.startswith("mps") and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name} was requested but MPS (Apple GPU) is not available here.")
    else:
        device = torch.device(name)
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                f"numbered from 0."
            )
    use_gpu_search(device.type == "cuda")
    return device


class MLRCRun:
    """One (dataset, protocol, loss, budget, seed) run of the MLRC protocol."""

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.watch = Stopwatch()
        self.progress = Progress(0, quiet=request.quiet)

    # -- step 1 ---------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Build and validate the whole configuration before any compute."""
        req = self.request
        check_request(req)
        self.loss_spec: LossSpec = LOSSES.get(req.loss)
        protocol_data, overrides, user = request_layers(req)
        self.budget_overrides = overrides
        self.config, self.paper = resolve_config(protocol_data, overrides, user, dataset_paper_settings)
        cached = self._cached_trunk_weights()
        if cached is not None and cached.found is not None:
            # Recorded as if given with --trunk-weights: the run record names the file used.
            user["model.trunk_weights"] = str(cached.found)
            self.config, self.paper = resolve_config(protocol_data, overrides, user, dataset_paper_settings)
            self.progress.message(f"pretrained trunk weights from the {cached.cache} cache: {cached.found}")
        self._validate_names(self.config)
        self.deviations: list[Deviation] = deviations(self.config, self.paper)
        self.search_space, self.fixed_params = self._search_space()
        self.augment = AUGMENTS[self.config.data.augment]
        self.device = pick_device(req.device)

    def _cached_trunk_weights(self) -> WeightsLookup | None:
        """Pretrained weights asked for without a file: the trunk's public file in a local cache.

        The torch hub cache, and for ``timm:NAME`` trunks first the Hugging Face hub cache.
        """
        m = self.config.model
        if not m.pretrained or m.trunk_weights:
            return None
        return lookup_cached_weights(trunk_spec(m.trunk))

    def _validate_names(self, c: RunConfig) -> None:
        positive = {
            "train.batch_size": c.train.batch_size,
            "train.iters_per_epoch": c.train.iters_per_epoch,
            "train.max_epochs": c.train.max_epochs,
            "train.eval_every": c.train.eval_every,
            "train.patience": c.train.patience,
            "search.n_trials": c.search.n_trials,
            "test.reps": c.test.reps,
            "model.embedding_dim": c.model.embedding_dim,
            "data.image_size": c.data.image_size,
        }
        validate_common(c, positive)
        if c.search.n_startup_trials < 0 or c.search.n_startup_trials > c.search.n_trials:
            raise ConfigError(
                f"search.n_startup_trials must be in [0, search.n_trials={c.search.n_trials}], "
                f"got {c.search.n_startup_trials}."
            )
        if c.protocol.n_folds != 4:
            raise ConfigError(f"protocol.n_folds must be 4 for MLRC (got {c.protocol.n_folds}).")

    def _search_space(self) -> tuple[dict[str, SearchDim], dict[str, float]]:
        spec = self.loss_spec
        unknown = sorted(set(self.config.loss) - set(spec.defaults))
        if unknown:
            raise ConfigError(
                f"Unknown loss.{unknown[0]} for loss {spec.name!r}; its hyperparameters are: "
                f"{', '.join(spec.defaults)}."
            )
        # The paper's values for this dataset (SOP SoftTriple: K = 2, no regulariser) are fixed
        # like the user's --set loss.X, which still wins (and is a recorded deviation).
        fixed = {**spec.defaults_for(self.config.data.dataset), **self.config.loss}
        space = {k: d for k, d in spec.search_space.items() if k not in fixed}
        for loss_name, ranges in self.config.space.items():
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
        return space, fixed

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
        loader = functools.partial(_load_fold_data, self.config, cache_dir(), self.features_path)
        self.executor = FoldExecutor(setup, data, loader, jobs)
        self.jobs = jobs
        self.progress.parallel = jobs

    # -- step 4 ---------------------------------------------------------------------------------
    def prepare_run_dir(self) -> None:
        req, c = self.request, self.config
        identity = {
            "protocol": req.protocol,
            "loss": req.loss,
            "budget": req.budget,
            "seed": req.seed,
            "config": config_to_dict(c),
        }
        name = f"{req.loss}-{req.budget}-seed{req.seed}-{config_hash(c)}"
        self.run_dir = req.out / c.data.dataset / req.protocol / name
        ident_path = self.run_dir / "run.json"
        if ident_path.exists():
            existing = read_json(ident_path)
            expected = json.loads(json.dumps(identity))
            if existing != expected:
                differ = differing_keys(existing, expected)
                raise DmlbenchError(
                    f"Run directory {self.run_dir} belongs to a different configuration (differs in: "
                    f"{', '.join(differ[:8])}); refusing to mix results. Use another --out or remove the "
                    "directory."
                )
            self.resumed = True
        else:
            write_json_atomic(ident_path, identity)
            self.resumed = False
        self.progress.message(f"run directory: {self.run_dir}" + (" (resuming)" if self.resumed else ""))

    # -- step 5 ---------------------------------------------------------------------------------
    def search(self) -> None:
        """Run search trials until ``search.n_trials`` are counted in the (possibly shared) study.

        One process: the journal in the run dir, stale trials recovered at start. ``--workers N``:
        this process prepares the study, N worker processes run trials, this one waits. A worker
        (``worker_id`` set) only runs trials. ``--storage URL``: every process sharing the database
        runs trials; stale trials of dead processes are failed by heartbeat and retried.
        """
        c, req = self.config, self.request
        n_folds = len(self.fold_sets)
        self.progress.total = (c.search.n_trials + c.test.reps) * n_folds
        if not self.search_space:
            # Nothing to tune (all hyperparameters fixed): MLRC's search degenerates to one trial.
            self.progress.message("search: every hyperparameter is fixed; running a single trial")
        target = c.search.n_trials if self.search_space else 1
        sampler = self._sampler_for(0)  # replaced before every ask (see _sampler_for)
        shared = is_database_url(req.storage)
        # The journal's first opener is alone with it (workers start later): it may repair the file.
        exclusive = not shared and req.worker_id is None
        journal = self.run_dir / "study.journal"
        if exclusive:
            repaired = repair_torn_journal(journal)
            if repaired:
                self.progress.message(f"search: {repaired}")
        self.storage = open_storage(req.storage, journal, req.heartbeat)
        study = open_shared_study(
            self.storage,
            self._study_name(),
            sampler,
            self._study_identity(),
            lambda s: enqueue_startup(
                s, self.search_space, c.search.n_startup_trials, derive_seed(req.seed, "sobol")
            ),
            exclusive=exclusive,
        )
        if exclusive:
            recovered = recover_stale(study)
            if recovered:
                self.progress.message(
                    f"search: retrying {recovered} trial(s) interrupted by a dead process, in their own place"
                )
        self.study = study
        if req.workers > 1 and req.worker_id is None:
            from benchmark.protocol.workers import run_local_workers  # imports this module

            self.progress.message(f"search: {req.workers} worker processes share the study")
            seen = [-1]

            def on_poll() -> None:
                done = min(len(counted_trials(study)), target)
                if done != seen[0]:
                    self.progress.skip((done - max(seen[0], 0)) * n_folds)
                    seen[0] = done
                    self.progress.status(
                        f"search: {done}/{target} trials done | best so far {self._best_so_far(study)}",
                        persistent=True,
                    )

            run_local_workers(req, on_poll)
        else:
            self._search_loop(study, target)
        if req.worker_id is not None:
            return  # a worker only runs trials; the parent picks the best and runs the test stage
        self.best = best_trial(study)
        self.best_params = {**self.loss_spec.defaults, **self.fixed_params, **self.best.params}
        self.progress.message(
            f"search: best trial #{self.best.number} mean val MAP@R {self.best.value:.4f} "
            f"params {_fmt_params(self.best.params)}"
        )

    def _sampler_for(self, position: int) -> optuna.samplers.BaseSampler:
        """A new sampler for the trial asked when ``position`` trials are counted.

        Optuna's samplers keep state between asks in one process (GPSampler: its random generator
        and the previous kernel fit, used as the next fit's starting point), so a process resuming
        a run would propose other points than one that never stopped. A new sampler per trial,
        seeded by the trial's place in the history, makes each suggestion a function of the run
        seed and the study's history alone. Each process owns its samplers; distinct seeds keep two
        workers with the same history from proposing the same point.
        """
        c, req = self.config, self.request
        worker = self._worker_key()
        keys: tuple[int | str, ...] = (
            ("sampler", position) if worker is None else ("sampler", worker, position)
        )
        return make_sampler(c.search.sampler, derive_seed(req.seed, *keys), c.search.n_startup_trials)

    def _worker_key(self) -> int | str | None:
        """Who this searching process is, for its seeds (None: the only process of the run)."""
        req = self.request
        if req.worker_id is not None:
            return req.worker_id
        if is_database_url(req.storage):
            # Processes on several machines: host and pid tell them apart.
            return f"{socket.gethostname()}:{os.getpid()}"
        return None

    def _study_name(self, stage: str = "search") -> str:
        """``search`` in the run's own journal; in a shared database, the run identity."""
        if not is_database_url(self.request.storage):
            return stage
        req = self.request
        return (
            f"dmlbench/{self.config.data.dataset}/{req.protocol}/{self.loss_spec.name}/{req.budget}/"
            f"seed{req.seed}/{config_hash(self.config)}/{stage}"
        )

    def _study_identity(self) -> dict[str, Any]:
        req = self.request
        return {
            "dataset": self.config.data.dataset,
            "protocol": req.protocol,
            "loss": self.loss_spec.name,
            "budget": req.budget,
            "seed": req.seed,
            "config_hash": config_hash(self.config),
        }

    def _search_loop(self, study: optuna.Study, target: int) -> None:
        """Ask and run trials until ``target`` are counted, whoever runs them (see budget_rank)."""
        n_folds = len(self.fold_sets)
        counted, _, _ = budget_state(study.get_trials(deepcopy=False))
        self.progress.skip(min(counted, target) * n_folds)
        while True:
            fail_stale(study)  # database storage: fail and re-enqueue trials of dead workers
            trials = study.get_trials(deepcopy=False)
            counted, running, waiting = budget_state(trials)
            if counted >= target:
                return
            if counted + running >= target and waiting == 0:
                # The remaining places are being trained elsewhere; wait in case a worker dies.
                time.sleep(_POLL_S)
                continue
            study.sampler = self._sampler_for(counted)
            trial = study.ask()
            rank = budget_rank(study.get_trials(deepcopy=False), trial.number)
            if rank >= target:
                # Another worker took the last place between our check and our ask.
                trial.set_user_attr(SURPLUS_ATTR, True)
                study.tell(trial, state=TrialState.PRUNED)
                continue
            with heartbeat(self.storage, trial._trial_id):
                self._run_trial(study, trial, rank + 1, target)

    def _best_so_far(self, study: optuna.Study) -> str:
        values = [t.value for t in study.get_trials(deepcopy=False) if is_result(t)]
        return f"{max(v for v in values if v is not None):.4f}" if values else "-"

    def _run_trial(self, study: optuna.Study, trial: optuna.Trial, i: int, n: int) -> None:
        params = {**self.loss_spec.defaults, **self.fixed_params, **suggest(trial, self.search_space)}
        best_so_far = self._best_so_far(study)
        n_folds = len(self.fold_sets)
        tasks = [
            FoldTask(f, params, derive_seed(self.request.seed, "trial", trial.number, f), embed_test=False)
            for f in range(n_folds)
        ]

        def on_epoch(task: FoldTask) -> EpochCallback:
            def cb(epoch: int, val_map: float, best: float) -> None:
                self.progress.status(
                    f"search trial {i}/{n} fold {task.fold + 1}/{n_folds} epoch {epoch} "
                    f"val MAP@R {val_map:.4f} | best trial so far {best_so_far}"
                )

            return cb

        def on_step(task: FoldTask) -> StepCallback:
            return self.step_status(f"search trial {i}/{n} fold {task.fold + 1}/{n_folds}")

        t0 = time.perf_counter()
        results: dict[int, FoldResult] = {}
        failure = None
        for outcome in self.executor.run(tasks, on_epoch, on_step):
            if outcome.failure is not None:
                failure = failure or outcome.failure
                continue
            assert outcome.result is not None
            results[outcome.task.fold] = outcome.result
            self.progress.fold_finished(outcome.result.wall_s)
            self.progress.status(
                f"search trial {i}/{n}: fold {outcome.task.fold + 1}/{n_folds} done, "
                f"best val MAP@R {outcome.result.best_val:.4f} | best trial so far {best_so_far}"
            )
        folds = [results[f].to_dict() for f in sorted(results)]
        trial.set_user_attr("folds", folds)
        trial.set_user_attr("wall_s", round(time.perf_counter() - t0, 3))
        if failure is not None:
            tell_failed(study, trial, failure)
            kill_point(f"search.trial_told:{trial.number}")
            self.progress.skip(n_folds - len(results))
            self.progress.status(
                f"search trial {i}/{n} FAILED ({failure}); scored {FAILED_SCORE:g} for the sampler",
                persistent=True,
            )
            return
        values = [results[f].best_val for f in sorted(results)]
        mean = float(np.mean(values))
        sem = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
        trial.set_user_attr("fold_sem", sem)
        study.tell(trial, mean)
        kill_point(f"search.trial_told:{trial.number}")
        self.progress.status(
            f"search trial {i}/{n} done: mean val MAP@R {mean:.4f} ± {sem:.4f} (sem) "
            f"| best so far {self._best_so_far(study)}",
            persistent=True,
        )

    # -- step 6 ---------------------------------------------------------------------------------
    def test_stage(self) -> None:
        """Retrain with the best parameters ``test.reps`` times and evaluate on the test classes.

        Journal storage: this process runs every rep; finished reps and folds are files in
        ``runs/.../test/`` (resume keeps them). Database storage: the reps are trials of a second
        study ``.../test`` in the same database, each claimed by one process and retried by
        heartbeat if that process dies; a rep's result is stored in its trial, so every process
        can build the record.
        """
        c = self.config
        self.rep_results: list[dict[str, Any]] = []
        if is_database_url(self.request.storage):
            self.rep_results = self._shared_test_stage()
            return
        n_folds = len(self.fold_sets)
        for r in range(c.test.reps):
            rep_path = self.run_dir / "test" / f"rep{r}.json"
            if rep_path.exists():
                self.rep_results.append(read_json(rep_path))
                self.progress.skip(n_folds)
                continue
            rep = self._run_rep(r)
            write_json_atomic(rep_path, rep)
            kill_point(f"test.rep_saved:{r}")
            self.rep_results.append(rep)

    def _shared_test_stage(self) -> list[dict[str, Any]]:
        reps, n_folds = self.config.test.reps, len(self.fold_sets)
        study = open_shared_study(
            self.storage,
            self._study_name("test"),
            optuna.samplers.RandomSampler(seed=derive_seed(self.request.seed, "test_study")),
            {**self._study_identity(), "best_trial": self.best.number},
            functools.partial(_enqueue_reps, reps=reps),
            exclusive=False,
        )
        skipped: set[int] = set()
        while True:
            fail_stale(study)
            trials = study.get_trials(deepcopy=False)
            done = {
                int(t.user_attrs["rep"]): t.user_attrs["result"]
                for t in trials
                if t.state == TrialState.COMPLETE and "result" in t.user_attrs
            }
            for r in set(done) - skipped:
                self.progress.skip(n_folds)
                skipped.add(r)
            if len(done) >= reps:
                return [done[r] for r in range(reps)]
            failed = [t for t in trials if t.state == TrialState.FAIL and FAILURE_ATTR in t.user_attrs]
            if failed:
                raise DmlbenchError(
                    f"Test-stage retraining failed in another process: {failed[0].user_attrs[FAILURE_ATTR]}"
                )
            if not any(t.state == TrialState.WAITING for t in trials):
                time.sleep(_POLL_S)  # the remaining reps are being trained elsewhere
                continue
            trial = study.ask()
            claimed = trial.user_attrs.get("rep")
            if claimed is None or int(claimed) in done:
                # Another process claimed the last queued rep first; ask() then made a fresh trial.
                trial.set_user_attr(SURPLUS_ATTR, True)
                study.tell(trial, state=TrialState.PRUNED)
                continue
            r = int(claimed)
            with heartbeat(self.storage, trial._trial_id):
                try:
                    rep = self._run_rep(r)
                except DmlbenchError as exc:
                    trial.set_user_attr(FAILURE_ATTR, str(exc))
                    study.tell(trial, state=TrialState.FAIL)
                    raise
                trial.set_user_attr("result", json.loads(json.dumps(rep)))
                study.tell(trial, 0.0)
            skipped.add(r)

    def _run_rep(self, r: int) -> dict[str, Any]:
        """One test repetition: 4 fold models with the best parameters, evaluated on the test set.

        Finished folds are files in ``runs/.../test/`` and are reused after an interruption.
        """
        c = self.config
        n_folds = len(self.fold_sets)
        test_dir = self.run_dir / "test"
        embs: dict[int, np.ndarray] = {}
        infos: dict[int, dict[str, object]] = {}
        tasks = []
        for f in range(n_folds):
            emb_path, info_path = test_dir / f"rep{r}-fold{f}.npy", test_dir / f"rep{r}-fold{f}.json"
            if emb_path.exists() and info_path.exists():  # finished before an interruption
                embs[f], infos[f] = np.load(emb_path), read_json(info_path)
                self.progress.skip(1)
            else:
                seed = derive_seed(self.request.seed, "test", r, f)
                tasks.append(FoldTask(f, self.best_params, seed, embed_test=True))

        def on_epoch(task: FoldTask) -> EpochCallback:
            def cb(epoch: int, val_map: float, best: float) -> None:
                self.progress.status(
                    f"test rep {r + 1}/{c.test.reps} fold {task.fold + 1}/{n_folds} epoch {epoch} "
                    f"val MAP@R {val_map:.4f} (best {best:.4f})"
                )

            return cb

        def on_step(task: FoldTask) -> StepCallback:
            return self.step_status(f"test rep {r + 1}/{c.test.reps} fold {task.fold + 1}/{n_folds}")

        for outcome in self.executor.run(tasks, on_epoch, on_step):
            f = outcome.task.fold
            if outcome.failure is not None:
                raise DmlbenchError(
                    f"Test-stage retraining diverged (rep {r}, {outcome.failure}) with the best search "
                    f"parameters {self.best_params}."
                )
            assert outcome.result is not None and outcome.test_embeddings is not None
            with atomic_write(test_dir / f"rep{r}-fold{f}.npy") as fh:
                np.save(fh, outcome.test_embeddings)
            write_json_atomic(test_dir / f"rep{r}-fold{f}.json", outcome.result.to_dict())
            kill_point(f"test.fold_saved:{r}:{f}")
            embs[f], infos[f] = outcome.test_embeddings, outcome.result.to_dict()
            self.progress.fold_finished(outcome.result.wall_s)
            self.progress.status(f"test rep {r + 1}/{c.test.reps}: fold {f + 1}/{n_folds} done")
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
        space = self.loss_spec.embedding_space
        labels = self.test_set.labels
        metrics = list(self.config.test.metrics)
        per_fold = [evaluate(e, labels, space, metrics) for e in fold_embs]
        separated = {m: float(np.mean([pf[m] for pf in per_fold])) for m in metrics}
        concatenated = evaluate(concatenate_embeddings(fold_embs, space), labels, space, metrics)
        return {"separated": separated, "concatenated": concatenated, "per_fold": per_fold}  # type: ignore[dict-item]

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
    def record_header(self) -> dict[str, Any]:
        """The fields every protocol's record starts with: schema, identity, config, deviations."""
        c, req = self.config, self.request
        return {
            "schema": RECORD_SCHEMA,
            # The protocol kind (benchmark.records.KINDS): which layout a reader checks the record against.
            "kind": c.protocol.name,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "protocol": req.protocol,
            "dataset": c.data.dataset,
            "loss": self.loss_spec.name,
            "loss_display_name": self.loss_spec.display_name,
            "embedding_space": self.loss_spec.embedding_space,
            "budget": req.budget,
            "seed": req.seed,
            "run_dir": str(self.run_dir),
            "config": config_to_dict(c),
            "deviations": [{"key": d.key, "paper": d.paper, "value": d.value} for d in self.deviations],
            # The trunk's weights file, its sha256 and (built-in weights) how it was made; None: random init.
            "trunk_weights": weights_record(c.model.trunk, c.model.pretrained, c.model.trunk_weights),
            # The dataset's own paper settings (docs/protocols.md §2.2 schedule, ...) and the schedule used.
            "dataset_paper_settings": dict(dataset_paper_settings(c.data.dataset, c.protocol.name)),
            "schedule": self.schedule_info(),
            "loss_dataset_defaults": self.loss_spec.defaults_for(c.data.dataset),
            **self._plugin_sources(),
        }

    def schedule_info(self) -> dict[str, Any]:
        """The convergence schedule used and where its values came from (paper, budget, user)."""
        declared = dataset_paper_settings(self.config.data.dataset, self.config.protocol.name)
        return describe_schedule(
            self.config,
            self.paper,
            self.request.budget,
            self.budget_overrides,
            any(k in declared for k in ("train.eval_every", "train.patience")),
        )

    def _plugin_sources(self) -> dict[str, Any]:
        """``plugins``: where the run's outside components came from (absent when all are built in)."""
        c = self.config
        used = {"loss": self.loss_spec.name, "dataset": c.data.dataset, "trunk": c.model.trunk}
        sources = record_sources(used)
        return {"plugins": sources} if sources else {}

    def build_record(self) -> dict[str, Any]:
        c = self.config
        metrics = list(c.test.metrics)
        per_rep = {
            mode: {m: [rep[mode][m] for rep in self.rep_results] for m in metrics}
            for mode in ("separated", "concatenated")
        }
        summary = {
            mode: {m: _interval_dict(per_rep[mode][m], c.test.confidence) for m in metrics}
            for mode in ("separated", "concatenated")
        }
        trials = []
        for t in self.study.get_trials(deepcopy=False):
            trials.append(
                {
                    "number": t.number,
                    # A failed trial is told the sampler FAILED_SCORE; the record keeps it a failure
                    # with no value, so no reader can take the score for a result.
                    "state": "FAIL" if is_failed(t) else t.state.name,
                    "origin": t.user_attrs.get("origin", "sampler"),
                    "params": t.params,
                    "value": None if is_failed(t) else t.value,
                    "sampler_value": t.value,
                    "interruptions": t.user_attrs.get(INTERRUPTIONS_ATTR, 0),
                    "fold_sem": t.user_attrs.get("fold_sem"),
                    "wall_s": t.user_attrs.get("wall_s"),
                    "failure": t.user_attrs.get(FAILURE_ATTR),
                    "interrupted": is_interrupted(t),
                    "folds": t.user_attrs.get("folds", []),
                }
            )
        record: dict[str, Any] = {
            **self.record_header(),
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
                "space": {
                    k: {"low": d.low, "high": d.high, "log": d.log} for k, d in self.search_space.items()
                },
                "fixed": self.fixed_params,
                "best_trial": self.best.number,
                "best_value": self.best.value,
                "best_params": self.best_params,
                "trials": trials,
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
                "study": self._study_name(),
            },
        }
        # Why each fold training stopped, per stage (docs/protocols.md §2.6): computed from the folds above.
        record["convergence"] = convergence_summary(record)
        return record

    def write_record(self) -> None:
        self.record = self.build_record()
        write_json_atomic(self.run_dir / "record.json", self.record)
        kill_point("record.run_dir")
        req = self.request
        self.record_path = (
            req.results_dir
            / self.config.data.dataset
            / req.protocol
            / "records"
            / f"{self.loss_spec.name}.{req.budget}.seed{req.seed}.json"
        )
        write_json_atomic(self.record_path, self.record)

    def update_leaderboard(self) -> None:
        from benchmark.report.plots import write_plots
        from benchmark.report.tables import write_tables

        results, dataset, protocol = self.request.results_dir, self.config.data.dataset, self.request.protocol
        self.leaderboard_paths = write_tables(results, dataset, protocol)
        kill_point("report.tables")
        self.progress.message("refreshing plots ...")
        self.leaderboard_paths += [p for p in write_plots(results, dataset, protocol) if p.suffix == ".png"]

    def step_status(self, where: str) -> StepCallback:
        """A per-step callback showing ``where`` and the step as a heartbeat (slow epochs only)."""
        max_epochs = self.config.train.max_epochs

        def cb(epoch: int, step: int, steps: int) -> None:
            self.progress.heartbeat(f"{where} epoch {epoch}/{max_epochs} step {step}/{steps}")

        return cb

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Execute every step in order (already finished work is reused)."""
        t0 = time.perf_counter()
        self.resolve()
        with self.watch.time("data"):
            self.load_data()
            self.split()
        self.prepare_run_dir()
        for d in self.deviations:
            self.progress.message(f"deviation from paper: {d.describe()}")
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
        self.watch.timings["total"] = round(time.perf_counter() - t0, 3)
        self.write_record()
        self.update_leaderboard()
        return RunResult(self.record_path, self.run_dir, self.leaderboard_paths, self.record)


def load_run_dataset(config: RunConfig, cache: Path) -> ImageDataset:
    """The configured dataset, subsampled as configured."""
    c = config.data
    options = DatasetOptions(
        data_dir=Path(c.data_dir) if c.data_dir else None, image_size=c.image_size, cache_dir=cache
    )
    dataset = subsample(load_dataset(c.dataset, options), c.max_classes, c.max_per_class)
    check_queries_have_positives(dataset.labels, {"whole": dataset.classes().tolist()}, c.dataset)
    return dataset


def fold_data(dataset: Samples, splits: MLRCSplit) -> FoldData:
    """The per-fold train/val sets and the test set of a split (of images or of cached features)."""
    return FoldData(
        [(dataset.subset(f.train), dataset.subset(f.val)) for f in splits.folds], dataset.subset(splits.test)
    )


def _load_fold_data(config: RunConfig, cache: Path, features_path: Path | None = None) -> FoldData:
    # Runs in each worker process: the dataset (or, frozen trunk, the feature file the parent wrote)
    # comes from the on-disk cache, the split is recomputed (a pure function of the labels), so
    # nothing large is pickled across processes.
    data: Samples
    if features_path is not None:
        data = load_features(features_path, config.data.dataset)
    else:
        data = load_run_dataset(config, cache)
    return fold_data(data, mlrc_split(data.classes().tolist(), config.protocol.n_folds))


def default_jobs(device: torch.device) -> int:
    """Fold-parallel processes: one per core on CPU (at most 4 folds run at once), 1 on a GPU."""
    return 1 if device.type != "cpu" else max(1, min(4, os.cpu_count() or 1))


def subsample(dataset: ImageDataset, max_classes: int, max_per_class: int) -> ImageDataset:
    """The first ``max_classes`` classes (sorted ids) and first ``max_per_class`` images of each (0 = all)."""
    if max_classes > 0:
        dataset = dataset.subset(dataset.classes()[:max_classes].tolist())
    if max_per_class > 0:
        order = np.argsort(dataset.labels, kind="stable")
        labels = dataset.labels[order]
        starts = np.searchsorted(labels, labels, side="left")
        keep = np.sort(order[(np.arange(len(labels)) - starts) < max_per_class])
        dataset = dataset.take(keep)
    return dataset


def concatenate_embeddings(fold_embs: list[np.ndarray], space: str) -> np.ndarray:
    """The 512-d concatenation of the fold models' embeddings (docs/protocols.md §2.4).

    Cosine space: each fold L2-normalised, concatenated, normalised again. Euclidean space
    (``cam``): raw embeddings concatenated, so the L2 distance is the root of the summed
    per-fold squared distances.
    """
    if space == "cosine":
        parts = [e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12) for e in fold_embs]
        cat = np.concatenate(parts, axis=1)
        out: np.ndarray = (cat / np.maximum(np.linalg.norm(cat, axis=1, keepdims=True), 1e-12)).astype(
            np.float32
        )
        return out
    raw: np.ndarray = np.concatenate(fold_embs, axis=1).astype(np.float32)
    return raw


def _interval_dict(values: list[float], confidence: float) -> dict[str, float]:
    iv = t_interval(values, confidence)
    return {"mean": iv.mean, "half_width": iv.half_width, "n": iv.n, "low": iv.low, "high": iv.high}


def _enqueue_reps(study: optuna.Study, reps: int) -> None:
    # The test study's trials are the repetitions, queued once by the process that creates it.
    for r in range(reps):
        study.enqueue_trial({}, user_attrs={"rep": r})


def _fmt_params(params: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in sorted(params.items()))
