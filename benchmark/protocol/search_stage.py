"""MLRC's hyperparameter search stage: an Optuna study whose trials each train every fold.

The stage knows studies (storages, heartbeats, samplers, the global trial budget) and nothing of
data, models or processes: it is given callables, ``run_folds`` (train a trial's folds, yielding
each fold's outcome), ``step_status`` (a progress callback) and ``start_workers`` (``--workers N``:
run N search processes to completion). So :mod:`benchmark.engine.workers` and this module need
not know the protocol that uses them.

One process: the journal in the run dir, stale trials recovered at start. ``--workers N``: this
process prepares the study, N worker processes run trials, this one waits. A worker
(``worker_id`` set) only runs trials. ``--storage URL``: every process sharing the database runs
trials; stale trials of dead processes are failed by heartbeat and retried.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from benchmark.config import RunConfig, config_hash
from benchmark.engine.parallel import FoldOutcome, FoldTask
from benchmark.engine.seeds import derive_seed
from benchmark.engine.train import EpochCallback, FoldResult, StepCallback
from benchmark.errors import DmlbenchError
from benchmark.faults import kill_point
from benchmark.losses import SearchDim
from benchmark.protocol.progress import Progress
from benchmark.protocol.request import RunRequest
from benchmark.protocol.run_files import JOURNAL
from benchmark.protocol.space import space_document
from benchmark.records import TrialDoc
from benchmark.search.storage import (
    SEARCH_ATTR,
    fail_stale,
    heartbeat,
    is_database_url,
    open_shared_study,
    open_storage,
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
    params_fixed,
    recover_stale,
    suggest,
    tell_failed,
)

#: How often a process waiting for other workers' trials polls the shared study.
POLL_S = 1.0

# Our own progress display says what Optuna's per-trial INFO lines would, in the protocol's terms.
optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Trains the given fold tasks, yielding each fold's outcome as it finishes (a FoldExecutor's run).
RunFolds = Callable[
    [Sequence[FoldTask], Callable[[FoldTask], EpochCallback], Callable[[FoldTask], StepCallback]],
    Iterable[FoldOutcome],
]


def study_name(request: RunRequest, config: RunConfig, loss: str, stage: str = "search") -> str:
    """``stage`` in the run's own journal; in a shared database, the run identity and ``stage``."""
    if not is_database_url(request.storage):
        return stage
    return (
        f"dmlbench/{config.data.dataset}/{request.protocol}/{loss}/{request.budget}/"
        f"seed{request.seed}/{config_hash(config)}/{stage}"
    )


def study_identity(request: RunRequest, config: RunConfig, loss: str) -> dict[str, Any]:
    """What a shared study must have been created for (checked by every process that opens it)."""
    return {
        "dataset": config.data.dataset,
        "protocol": request.protocol,
        "loss": loss,
        "budget": request.budget,
        "seed": request.seed,
        "config_hash": config_hash(config),
    }


class SearchStage:
    """Search trials until ``search.n_trials`` are counted in the (possibly shared) study."""

    def __init__(
        self,
        *,
        request: RunRequest,
        config: RunConfig,
        loss: str,
        loss_defaults: Mapping[str, float],
        search_space: Mapping[str, SearchDim],
        fixed_params: Mapping[str, float],
        run_dir: Path,
        n_folds: int,
        progress: Progress,
        run_folds: RunFolds,
        step_status: Callable[[str], StepCallback],
        start_workers: Callable[[Callable[[], None]], None],
    ) -> None:
        self.request, self.config, self.loss = request, config, loss
        self.loss_defaults, self.search_space, self.fixed_params = loss_defaults, search_space, fixed_params
        self.run_dir, self.n_folds, self.progress = run_dir, n_folds, progress
        self.run_folds, self.step_status, self.start_workers = run_folds, step_status, start_workers

    def run(self) -> None:
        """Open the study and run (or wait for) the trials; sets ``study``, ``storage`` and, unless
        this process is a worker, ``best`` and ``best_params``."""
        c, req = self.config, self.request
        n_folds = self.n_folds
        self.progress.total = (c.search.n_trials + c.test.reps) * n_folds
        if not self.search_space:
            # Nothing to tune (all hyperparameters fixed): MLRC's search degenerates to one trial.
            self.progress.message("search: every hyperparameter is fixed; running a single trial")
        target = c.search.n_trials if self.search_space else 1
        sampler = self._sampler_for(0)  # replaced before every ask (see _sampler_for)
        shared = is_database_url(req.storage)
        # The journal's first opener is alone with it (workers start later): it may repair the file.
        exclusive = not shared and req.worker_id is None
        journal = self.run_dir / JOURNAL
        if exclusive:
            repaired = repair_torn_journal(journal)
            if repaired:
                self.progress.message(f"search: {repaired}")
        self.storage = open_storage(req.storage, journal, req.heartbeat)
        study = open_shared_study(
            self.storage,
            study_name(req, c, self.loss),
            sampler,
            study_identity(req, c, self.loss),
            self._set_up,
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

            self.start_workers(on_poll)
        else:
            self._search_loop(study, target)
        if req.worker_id is not None:
            return  # a worker only runs trials; the parent picks the best and runs the test stage
        self.best = best_trial(study)
        self.best_params = {**self.loss_defaults, **self.fixed_params, **self.best.params}
        self.progress.message(
            # Trials are shown 1-based everywhere (progress "trial 3/10", plots); the record keeps
            # Optuna's 0-based number.
            f"search: best trial #{self.best.number + 1} mean val MAP@R {self.best.value:.4f} "
            f"params {_fmt_params(self.best.params)}"
        )

    def _set_up(self, study: optuna.Study) -> None:
        """Say what the new study searches, then queue its Sobol startup points."""
        search = {"space": space_document(self.search_space), "fixed": dict(self.fixed_params)}
        study.set_user_attr(SEARCH_ATTR, search)
        c, seed = self.config, self.request.seed
        enqueue_startup(study, self.search_space, c.search.n_startup_trials, derive_seed(seed, "sobol"))

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

    def _search_loop(self, study: optuna.Study, target: int) -> None:
        """Ask and run trials until ``target`` are counted, whoever runs them (see budget_rank)."""
        counted, _, _ = budget_state(study.get_trials(deepcopy=False))
        self.progress.skip(min(counted, target) * self.n_folds)
        while True:
            fail_stale(study)  # database storage: fail and re-enqueue trials of dead workers
            trials = study.get_trials(deepcopy=False)
            counted, running, waiting = budget_state(trials)
            if counted >= target:
                return
            if counted + running >= target and waiting == 0:
                # The remaining places are being trained elsewhere; wait in case a worker dies.
                time.sleep(POLL_S)
                continue
            batch = self._ask(study, target, counted, running)
            if not batch:
                continue  # another worker took the last place between our check and our ask
            with contextlib.ExitStack() as beats:
                for trial, _ in batch:
                    beats.enter_context(heartbeat(self.storage, trial._trial_id))
                self._run_trials(study, batch, target)

    def _ask(
        self, study: optuna.Study, target: int, counted: int, running: int
    ) -> list[tuple[optuna.Trial, int]]:
        """The trials to train next with their places in the budget (1-based): one, or every queued
        trial whose parameters are already fixed.

        The queued Sobol points (and trials retried with all their parameters) do not depend on
        any result, so their folds can train in one pool without changing a number: the pool
        starts the next trial's fold whenever a worker frees up instead of waiting for a trial's
        slowest fold. Sampled trials stay one at a time (each depends on the results before it).
        Only a process alone with its journal pools (``--workers``/``--storage`` keep one trial
        per ask: their places are claimed by rank).
        """
        pooled = self._fixed_queue(study) if self._pools() else 0
        n = max(1, min(pooled, target - counted - running))
        batch: list[tuple[optuna.Trial, int]] = []
        for _ in range(n):
            # Pooled trials all get the sampler of place ``counted``: it draws none of their
            # (fixed) parameters, so their values are those of one-at-a-time asks.
            study.sampler = self._sampler_for(counted)
            trial = study.ask()
            rank = budget_rank(study.get_trials(deepcopy=False), trial.number)
            if rank >= target:
                # Another worker took the last place between our check and our ask.
                trial.set_user_attr(SURPLUS_ATTR, True)
                study.tell(trial, state=TrialState.PRUNED)
                break
            batch.append((trial, rank + 1))
        return batch

    def _pools(self) -> bool:
        req = self.request
        return req.worker_id is None and req.workers <= 1 and not is_database_url(req.storage)

    def _fixed_queue(self, study: optuna.Study) -> int:
        """How many trials at the head of the queue (the next asks, lowest number first) have every
        searched parameter fixed already (enqueued Sobol points, retried trials)."""
        waiting = sorted(
            (t for t in study.get_trials(deepcopy=False) if t.state == TrialState.WAITING),
            key=lambda t: t.number,
        )
        n = 0
        for t in waiting:
            if not params_fixed(t, self.search_space):
                break
            n += 1
        return n

    def _best_so_far(self, study: optuna.Study) -> str:
        values = [t.value for t in study.get_trials(deepcopy=False) if is_result(t)]
        return f"{max(v for v in values if v is not None):.4f}" if values else "-"

    def _run_trials(self, study: optuna.Study, batch: Sequence[tuple[optuna.Trial, int]], n: int) -> None:
        """Train the folds of ``batch``'s trials in one pool; tell each trial as its folds finish."""
        n_folds = self.n_folds
        # Refreshed after every told trial, so epoch lines agree with the trial-done lines.
        best_so_far = [self._best_so_far(study)]
        trials = {trial.number: (trial, i) for trial, i in batch}
        tasks = []
        for trial, _ in batch:
            params = {**self.loss_defaults, **self.fixed_params, **suggest(trial, self.search_space)}
            tasks += [
                FoldTask(
                    f, params, derive_seed(self.request.seed, "trial", trial.number, f), False, trial.number
                )
                for f in range(n_folds)
            ]

        def on_epoch(task: FoldTask) -> EpochCallback:
            i = trials[task.group][1]

            def cb(epoch: int, val_map: float, best: float) -> None:
                self.progress.status(
                    f"search trial {i}/{n} fold {task.fold + 1}/{n_folds} epoch {epoch} "
                    f"val MAP@R {val_map:.4f} | best trial so far {best_so_far[0]}"
                )

            return cb

        def on_step(task: FoldTask) -> StepCallback:
            i = trials[task.group][1]
            return self.step_status(f"search trial {i}/{n} fold {task.fold + 1}/{n_folds}")

        t0 = time.perf_counter()
        results: dict[int, dict[int, FoldResult]] = {t: {} for t in trials}
        failures: dict[int, str] = {}
        finished: dict[int, int] = {t: 0 for t in trials}
        for outcome in self.run_folds(tasks, on_epoch, on_step):
            number, fold = outcome.task.group, outcome.task.fold
            trial, i = trials[number]
            finished[number] += 1
            kill_point(f"search.fold_done:{number}:{fold}")
            if outcome.failure is not None:
                failures.setdefault(number, outcome.failure)
            else:
                assert outcome.result is not None
                results[number][fold] = outcome.result
                self.progress.fold_finished(outcome.result.wall_s)
                self.progress.status(
                    f"search trial {i}/{n}: fold {fold + 1}/{n_folds} done, "
                    f"best val MAP@R {outcome.result.best_val:.4f} | best trial so far {best_so_far[0]}",
                    milestone=True,
                )
            if finished[number] == n_folds:
                # A pooled trial's wall time runs from the pool's start to its last fold.
                wall_s = time.perf_counter() - t0
                self._tell(study, trial, i, n, results[number], failures.get(number), wall_s)
                best_so_far[0] = self._best_so_far(study)

    def _tell(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        i: int,
        n: int,
        results: Mapping[int, FoldResult],
        failure: str | None,
        wall_s: float,
    ) -> None:
        """Store a trial's folds and tell the study its mean validation score (or its failure)."""
        n_folds = self.n_folds
        folds = [results[f].to_dict() for f in sorted(results)]
        trial.set_user_attr("folds", folds)
        trial.set_user_attr("wall_s", round(wall_s, 3))
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

    def trial_records(self) -> list[TrialDoc]:
        """Every trial of the study as the run record lists it."""
        trials: list[TrialDoc] = []
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
        return trials


def shared_reps(
    storage: optuna.storages.BaseStorage,
    name: str,
    identity: Mapping[str, Any],
    seed: int,
    reps: int,
    run_rep: Callable[[int], dict[str, Any]],
    on_done: Callable[[int], None],
) -> list[dict[str, Any]]:
    """The test stage's repetitions as trials of a study ``name`` in a shared database.

    Each rep is claimed by one process (``run_rep(r)``) and retried by heartbeat if that process
    dies; a rep's result is stored in its trial, so every process can build the record.
    ``on_done(r)`` is called once for each rep finished elsewhere or earlier.
    """
    study = open_shared_study(
        storage,
        name,
        optuna.samplers.RandomSampler(seed=seed),
        identity,
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
            on_done(r)
            skipped.add(r)
        if len(done) >= reps:
            return [done[r] for r in range(reps)]
        failed = [t for t in trials if t.state == TrialState.FAIL and FAILURE_ATTR in t.user_attrs]
        if failed:
            raise DmlbenchError(
                f"Test-stage retraining failed in another process: {failed[0].user_attrs[FAILURE_ATTR]}"
            )
        if not any(t.state == TrialState.WAITING for t in trials):
            time.sleep(POLL_S)  # the remaining reps are being trained elsewhere
            continue
        trial = study.ask()
        claimed = trial.user_attrs.get("rep")
        if claimed is None or int(claimed) in done:
            # Another process claimed the last queued rep first; ask() then made a fresh trial.
            trial.set_user_attr(SURPLUS_ATTR, True)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        r = int(claimed)
        with heartbeat(storage, trial._trial_id):
            try:
                rep = run_rep(r)
            except DmlbenchError as exc:
                trial.set_user_attr(FAILURE_ATTR, str(exc))
                study.tell(trial, state=TrialState.FAIL)
                raise
            trial.set_user_attr("result", json.loads(json.dumps(rep)))
            study.tell(trial, 0.0)
        skipped.add(r)


def _enqueue_reps(study: optuna.Study, reps: int) -> None:
    # The test study's trials are the repetitions, queued once by the process that creates it.
    for r in range(reps):
        study.enqueue_trial({}, user_attrs={"rep": r})


def _fmt_params(params: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in sorted(params.items()))
