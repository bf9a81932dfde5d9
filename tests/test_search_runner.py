"""The runner's search stage with training replaced by a function of the parameters: what the
study is told (the mean over folds; a failed trial's score), in seconds instead of a real run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from benchmark.engine.parallel import FoldOutcome, FoldTask
from benchmark.engine.train import FoldResult
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest
from benchmark.protocol.search_stage import SearchStage
from benchmark.search.study import FAILED_SCORE, FAILURE_ATTR, is_failed

FoldScore = Callable[[FoldTask], float | None]  # None: the fold diverged


class ScoredExecutor:
    """Stands in for FoldExecutor: each fold's best validation MAP@R is ``score(task)``."""

    def __init__(self, score: FoldScore, test_shape: tuple[int, int] = (0, 0), reverse: bool = False) -> None:
        self.score = score
        self.test_shape = test_shape
        self.reverse = reverse  # finish each call's tasks last-first (workers finish in any order)
        self.tasks: list[FoldTask] = []
        self.calls: list[list[tuple[int, int]]] = []  # the (group, fold) keys of each run call

    def run(
        self, tasks: Sequence[FoldTask], on_epoch: Any = None, on_step: Any = None
    ) -> Iterator[FoldOutcome]:
        self.calls.append([t.key for t in tasks])
        for task in reversed(tasks) if self.reverse else tasks:
            self.tasks.append(task)
            value = self.score(task)
            if value is None:
                yield FoldOutcome(task, None, None, f"fold {task.fold}: loss became nan at epoch 1")
            else:
                # Test embeddings drawn from the fold's seed: a seed repeated is a result repeated.
                test = (
                    np.random.default_rng(task.seed).normal(size=self.test_shape).astype(np.float32)
                    if task.embed_test
                    else None
                )
                yield FoldOutcome(task, FoldResult(value, 1, 1, 0.0, [(1, value)]), test, None)

    def close(self, abort: bool = False) -> None:
        pass


def searched(
    tmp_path: Path, score: FoldScore, n_trials: int, n_startup: int, reverse: bool = False
) -> tuple[MLRCRun, optuna.Study]:
    """Run only the search stage of a smoke run (glyphs, contrastive) with ``score`` as training."""
    run = MLRCRun(
        RunRequest(
            loss="contrastive",
            budget="smoke",
            out=tmp_path / "runs",
            results_dir=tmp_path / "results",
            jobs=1,
            quiet=True,
            overrides={"search.n_trials": n_trials, "search.n_startup_trials": n_startup},
        )
    )
    run.resolve()
    run.load_data()
    run.split()
    run.prepare_run_dir()
    shape = (len(run.test_set.labels), run.config.model.embedding_dim)
    run.executor = ScoredExecutor(score, shape, reverse)  # type: ignore[assignment]
    run.search()
    return run, run.study


def test_search_objective_is_the_mean_over_folds(tmp_path: Path, cache_dir: Path) -> None:
    # Folds score very differently, so the mean differs from any one fold, the median, max, min.
    fold_offsets = [0.05, 0.30, 0.10, 0.60]

    def score(task: FoldTask) -> float:
        return 0.1 * task.params["pos_margin"] + fold_offsets[task.fold]

    run, study = searched(tmp_path, score, n_trials=3, n_startup=2)
    for t in study.get_trials():
        expected = np.mean([0.1 * t.params["pos_margin"] + o for o in fold_offsets])
        assert t.value is not None and abs(t.value - expected) < 1e-12
        assert [f["best_val_map_at_r"] for f in t.user_attrs["folds"]] == [
            0.1 * t.params["pos_margin"] + o for o in fold_offsets
        ]
    assert run.best.value == max(t.value for t in study.get_trials() if t.value is not None)
    # Every fold of every trial trains once, with its own seed.
    seeds = [task.seed for task in run.executor.tasks]  # type: ignore[attr-defined]
    assert len(seeds) == 3 * 4 and len(set(seeds)) == len(seeds)


def test_diverging_region_is_scored_and_avoided_by_the_runner(tmp_path: Path, cache_dir: Path) -> None:
    """A loss that always diverges for pos_margin >= 0.9, where the score is otherwise highest:
    the runner tells the sampler 0 for each failure, so later GP trials stay below the threshold,
    and the failure keeps its reason and never becomes the best trial."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    def score(task: FoldTask) -> float | None:
        p = task.params
        if p["pos_margin"] >= 0.9:
            return None
        return 0.2 + 0.2 * p["pos_margin"] - 0.05 * (p["neg_margin"] - 1.0) ** 2 + 0.001 * task.fold

    run, study = searched(tmp_path, score, n_trials=14, n_startup=4)
    trials = study.get_trials()
    failed = [t.number for t in trials if is_failed(t)]
    assert failed, "the Sobol points should reach the diverging region"
    late = [n for n in failed if n >= 8]
    assert len(late) <= 2, f"later GP trials kept diverging: trials {failed} failed"
    for n in failed:
        assert trials[n].value == FAILED_SCORE and "loss became nan" in trials[n].user_attrs[FAILURE_ATTR]
    assert run.best.number not in failed and run.best.params["pos_margin"] < 0.9


def test_test_repetitions_train_with_distinct_seeds(tmp_path: Path, cache_dir: Path) -> None:
    """Each test repetition retrains its 4 fold models with seeds of its own (MLRC's repetitions
    measure the training's variance); a seed reused across repetitions repeats a result."""
    run, _ = searched(tmp_path, lambda task: 0.5, n_trials=2, n_startup=1)
    executor: ScoredExecutor = run.executor  # type: ignore[assignment]
    searched_tasks = len(executor.tasks)
    run.test_stage()
    test_tasks = executor.tasks[searched_tasks:]
    assert all(t.embed_test and t.params == run.best_params for t in test_tasks)
    reps = run.config.test.reps
    assert reps >= 2 and len(test_tasks) == 4 * reps
    seeds = [t.seed for t in test_tasks]
    assert len(set(seeds)) == len(seeds), f"a test seed is reused: {seeds}"
    assert not set(seeds) & {t.seed for t in executor.tasks[:searched_tasks]}
    maps = [rep["separated"]["map_at_r"] for rep in run.rep_results]
    assert len(set(maps)) == reps, f"repetitions gave identical results: {maps}"


def _smooth_score(task: FoldTask) -> float:
    p = task.params
    return 0.3 + 0.2 * p["pos_margin"] - 0.05 * (p["neg_margin"] - 1.0) ** 2 + 0.01 * task.fold


def test_startup_trials_pool_their_folds_and_give_the_sequential_search(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queued Sobol trials' folds go to the executor in one call (a freed worker starts the
    next trial's fold), the sampled trials one call each; finishing in another order changes no
    trial: parameters, values and fold results equal a search that runs every trial alone."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    run, study = searched(tmp_path / "pooled", _smooth_score, n_trials=6, n_startup=3, reverse=True)
    calls = run.executor.calls  # type: ignore[attr-defined]
    assert calls[0] == [(t, f) for t in range(3) for f in range(4)]
    assert calls[1:] == [[(t, f) for f in range(4)] for t in range(3, 6)]

    monkeypatch.setattr(SearchStage, "_pools", lambda self: False)
    alone, alone_study = searched(tmp_path / "alone", _smooth_score, n_trials=6, n_startup=3)
    assert alone.executor.calls == [[(t, f) for f in range(4)] for t in range(6)]  # type: ignore[attr-defined]

    def trials(s: optuna.Study) -> list[tuple[Any, ...]]:
        return [(t.number, t.state, t.params, t.value, t.user_attrs["folds"]) for t in s.get_trials()]

    assert trials(study) == trials(alone_study)
    assert run.best_params == alone.best_params


def test_test_repetitions_pool_their_folds(tmp_path: Path, cache_dir: Path) -> None:
    """All repetitions' folds go to the executor in one call; the record keeps rep order whatever
    order they finish in, with each rep's own folds."""
    run, _ = searched(tmp_path, _smooth_score, n_trials=2, n_startup=1, reverse=True)
    executor: ScoredExecutor = run.executor  # type: ignore[assignment]
    n_calls = len(executor.calls)
    run.test_stage()
    reps = run.config.test.reps
    assert executor.calls[n_calls:] == [[(r, f) for r in range(reps) for f in range(4)]]
    assert [rep["rep"] for rep in run.rep_results] == list(range(reps))
    seeds = {t.key: t.seed for t in executor.tasks if t.embed_test}
    shape = executor.test_shape
    for rep in run.rep_results:
        # Evaluated on its own folds' embeddings (ScoredExecutor draws them from the fold's seed).
        own = [
            np.random.default_rng(seeds[(rep["rep"], f)]).normal(size=shape).astype(np.float32)
            for f in range(4)
        ]
        expected = run._evaluate_folds(own)
        assert rep["separated"] == expected["separated"] and rep["concatenated"] == expected["concatenated"]
