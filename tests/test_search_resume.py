"""The search stage without training: an interrupted trial is retried in its own place, a resumed
search proposes exactly what an uninterrupted one does, and failed trials steer the GP away.

The objective here is a cheap function of the parameters, so every interleaving runs in seconds;
tests/test_kill_points.py checks the same with real training, killed at random moments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from benchmark.errors import ConfigError
from benchmark.losses import SearchDim
from benchmark.search.study import (
    FAILED_SCORE,
    FAILURE_ATTR,
    INTERRUPTIONS_ATTR,
    best_trial,
    counted_trials,
    enqueue_startup,
    is_counted,
    is_failed,
    is_result,
    recover_stale,
    suggest,
    tell_failed,
)

SPACE = {"x": SearchDim(0.0, 1.0), "y": SearchDim(1e-3, 1.0, log=True)}
N_STARTUP, N_TRIALS = 3, 6


def _open(path: Path) -> optuna.Study:
    """A new Study object on the journal file, as a new process would open it."""
    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.create_study(
        study_name="search", storage=storage, direction="maximize", load_if_exists=True
    )


def _objective(params: dict[str, float]) -> float:
    return 1.0 - (params["x"] - 0.3) ** 2 - 0.1 * (params["y"] - 0.5) ** 2


def _search(path: Path, stop: tuple[int, str] | None = None) -> bool:
    """The runner's search loop (one new sampler per trial, seeded by its place in the history)
    on ``path``; ``stop=(k, when)`` leaves trial k RUNNING, as a SIGKILL would, ``when`` being
    'asked' (no parameter drawn yet), 'half' (one of two drawn) or 'suggested' (drawn, being
    trained). True: it finished."""
    study = _open(path)
    if not study.get_trials():
        enqueue_startup(study, SPACE, N_STARTUP, seed=7)
    recover_stale(study)
    while (counted := len(counted_trials(study))) < N_TRIALS:
        study.sampler = optuna.samplers.GPSampler(seed=1000 + counted, n_startup_trials=N_STARTUP)
        trial = study.ask()
        if stop == (trial.number, "asked"):
            return False
        if stop == (trial.number, "half"):
            # Killed between two parameter writes: the first is stored, the second is not (the GP
            # has already stored its whole point on the trial).
            first = next(iter(SPACE))
            trial.suggest_float(first, SPACE[first].low, SPACE[first].high, log=SPACE[first].log)
            return False
        params = suggest(trial, SPACE)
        if stop == (trial.number, "suggested"):
            return False
        study.tell(trial, _objective(params))
    return True


def _history(path: Path) -> list[tuple[int, str, dict[str, float], float | None]]:
    return [(t.number, t.state.name, t.params, t.value) for t in _open(path).get_trials()]


def test_interrupted_trial_is_retried_in_its_own_place(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    assert not _search(path, stop=(0, "suggested"))  # killed while training the first Sobol point
    before = _open(path).get_trials()
    assert before[0].state == TrialState.RUNNING
    study = _open(path)
    assert recover_stale(study) == 1
    trials = study.get_trials()
    # Back in the queue under its own number, ahead of the Sobol points behind it, nothing added.
    assert [t.state for t in trials] == [TrialState.WAITING] * N_STARTUP
    assert trials[0].params == before[0].params and trials[0].user_attrs[INTERRUPTIONS_ATTR] == 1
    retried = study.ask()
    assert retried.number == 0 and suggest(retried, SPACE) == before[0].params
    assert not any(t.state == TrialState.FAIL for t in study.get_trials())


@pytest.mark.parametrize("when", ["asked", "half", "suggested"])
def test_resumed_search_equals_an_uninterrupted_one_wherever_it_stopped(tmp_path: Path, when: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    reference = tmp_path / "reference.journal"
    assert _search(reference)
    expected = _history(reference)
    assert len(expected) == N_TRIALS and all(state == "COMPLETE" for _, state, _, _ in expected)
    # Stopped inside the first Sobol point (enqueued), the first and the last GP trial (sampled).
    for k in (0, N_STARTUP, N_TRIALS - 1):
        path = tmp_path / f"stopped-{k}-{when}.journal"
        assert not _search(path, stop=(k, when))
        assert _search(path)
        assert _history(path) == expected, f"stopped inside trial {k} ({when})"


def test_one_sampler_per_process_would_not_resume_exactly(tmp_path: Path) -> None:
    """Why the runner makes a new sampler per trial: GPSampler keeps state between asks (random
    generator, last kernel fit), so one sampler kept for a whole process proposes differently
    after a restart. If this ever stops being true the per-trial sampler is merely harmless."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    def run(path: Path, restart_after: int | None) -> list[dict[str, float]]:
        def new_study() -> optuna.Study:
            study = _open(path)
            study.sampler = optuna.samplers.GPSampler(seed=1000, n_startup_trials=N_STARTUP)
            return study

        study = new_study()
        enqueue_startup(study, SPACE, N_STARTUP, seed=7)
        for n in range(N_TRIALS + 2):
            if n == restart_after:
                study = new_study()
            trial = study.ask()
            study.tell(trial, _objective(suggest(trial, SPACE)))
        return [t.params for t in study.get_trials()]

    assert run(tmp_path / "a.journal", None) != run(tmp_path / "b.journal", N_STARTUP + 1)


def _steer(tmp_path: Path, tell: Callable[[optuna.Study, optuna.Trial], None]) -> list[int]:
    """A GP search whose best region (x >= 0.6) always diverges; the trials that failed."""
    space = {"x": SearchDim(0.0, 1.0), "y": SearchDim(0.0, 1.0)}
    study = _open(tmp_path / "steer.journal")
    enqueue_startup(study, space, 4, seed=0)
    failed = []
    for k in range(16):
        study.sampler = optuna.samplers.GPSampler(seed=k, n_startup_trials=4)
        trial = study.ask()
        p = suggest(trial, space)
        if p["x"] >= 0.6:
            tell(study, trial)
            failed.append(trial.number)
        else:  # rising towards the diverging region: a sampler that ignores failures walks into it
            study.tell(trial, 0.3 + 0.5 * p["x"] - 0.1 * (p["y"] - 0.5) ** 2)
    trials = study.get_trials()
    best = best_trial(study)
    assert best.params["x"] < 0.6 and is_result(best)
    assert all(is_failed(trials[n]) and is_counted(trials[n]) for n in failed)
    assert all(trials[n].user_attrs[FAILURE_ATTR] == "diverged" for n in failed)
    return failed


def test_failed_trials_are_scored_so_the_gp_moves_away(tmp_path: Path) -> None:
    """MLRC told Ax 0 for a failed trial; Optuna ignores a FAIL, so the GP kept proposing the
    region that diverges (with FAIL, 6 to 8 of the last 8 trials failed in 5 seeds; scored 0, 0-2)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    failed = _steer(tmp_path, lambda study, trial: tell_failed(study, trial, "diverged"))
    late = [n for n in failed if n >= 8]
    assert len(late) <= 3, f"the GP kept proposing the diverging region: trials {failed} failed"
    trials = _open(tmp_path / "steer.journal").get_trials()
    assert all(trials[n].value == FAILED_SCORE for n in failed)  # what the sampler saw


def test_a_failed_trial_is_never_the_best(tmp_path: Path) -> None:
    study = _open(tmp_path / "s.journal")
    a = study.ask()
    tell_failed(study, a, "loss became nan")
    with pytest.raises(ConfigError, match="Every search trial failed"):
        best_trial(study)
    b = study.ask()
    study.tell(b, -1.0)  # below the failure score: still the only real result
    assert best_trial(study).number == b.number
