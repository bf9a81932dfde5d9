"""Optuna study management for the hyperparameter search (docs/protocols.md §2.3).

The study lives in an Optuna journal file inside the run directory, so an interrupted run is
continued by re-running the same command: finished trials are kept, a trial left RUNNING by a
killed process goes back to the queue in its own place (same number, same parameters), and only
the missing number of trials is run. With a new sampler per trial, seeded by the trial's place
in the history (the runner's ``_sampler_for``), a resumed run asks, trains and tells exactly the
trials an uninterrupted run would.

A trial that fails because of its parameters (diverged, crashed) is told the sampler the score
:data:`FAILED_SCORE` (MLRC gave Ax a 0 for such trials), so a Bayesian sampler learns to avoid
the region; the trial keeps its :data:`FAILURE_ATTR` reason and is never a result
(:func:`is_failed`, :func:`best_trial`, the run record).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from scipy.stats import qmc

from benchmark.errors import ConfigError
from benchmark.losses import SearchDim
from benchmark.search.options import SAMPLERS

# Attribute set on a trial that failed because its process died, not because of its parameters;
# such trials are retried and do not count towards the configured number of trials.
INTERRUPTED_ATTR = "interrupted"
FAILURE_ATTR = "failure"
# How many times a journal trial was put back in the queue after its process died (provenance).
INTERRUPTIONS_ATTR = "interruptions"
# What the sampler is told for a trial failed by its parameters: the worst MAP@R, as MLRC told Ax.
FAILED_SCORE = 0.0
# Attribute of a trial asked by a worker after the global budget was already taken by trials with
# lower numbers (a race between workers); it is told PRUNED before any parameter is drawn.
SURPLUS_ATTR = "surplus"


def make_sampler(name: str, seed: int, n_startup_trials: int) -> optuna.samplers.BaseSampler:
    """The seeded Bayesian (or baseline) sampler; Sobol startup points are enqueued separately."""
    SAMPLERS.get(name)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
    return optuna.samplers.RandomSampler(seed=seed)


def suggest(trial: optuna.Trial, space: Mapping[str, SearchDim]) -> dict[str, float]:
    """Draw one value per search dimension from ``trial``."""
    return {k: trial.suggest_float(k, d.low, d.high, log=d.log) for k, d in space.items()}


def space_from_document(document: Mapping[str, Mapping[str, Any]]) -> dict[str, SearchDim]:
    """A record's ``search.space`` as the search space it was (the inverse of
    :func:`benchmark.protocol.space.space_document`; here, below the protocols, so that record
    readers can use it)."""
    return {
        name: SearchDim(float(d["low"]), float(d["high"]), bool(d.get("log", False)))
        for name, d in document.items()
    }


def distributions(space: Mapping[str, SearchDim]) -> dict[str, FloatDistribution]:
    """The Optuna distribution of each dimension, as :func:`suggest` draws it."""
    return {k: FloatDistribution(d.low, d.high, log=d.log) for k, d in space.items()}


def sobol_points(space: Mapping[str, SearchDim], n: int, seed: int) -> list[dict[str, float]]:
    """``n`` scrambled-Sobol points mapped into ``space`` (log dimensions uniform in log space)."""
    if n <= 0 or not space:
        return []
    names = sorted(space)
    m = max(1, math.ceil(math.log2(n)))
    unit = qmc.Sobol(d=len(names), scramble=True, seed=seed).random_base2(m)[:n]
    points = []
    for row in unit:
        point = {}
        for u, name in zip(row, names, strict=True):
            d = space[name]
            if d.log:
                value = math.exp(math.log(d.low) + float(u) * (math.log(d.high) - math.log(d.low)))
            else:
                value = d.low + float(u) * (d.high - d.low)
            point[name] = min(max(value, d.low), d.high)  # guard against rounding past the bounds
        points.append(point)
    return points


def open_study(journal: Path, study_name: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create or load the study stored in ``journal`` (single process; see :mod:`.storage`)."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    return optuna.create_study(
        study_name=study_name, storage=storage, sampler=sampler, direction="maximize", load_if_exists=True
    )


def enqueue_startup(study: optuna.Study, space: Mapping[str, SearchDim], n: int, seed: int) -> None:
    """Enqueue the Sobol startup points once, when the study is new."""
    if study.get_trials(deepcopy=False):
        return
    for point in sobol_points(space, n, seed):
        study.enqueue_trial(point, user_attrs={"origin": "sobol"})


def recover_stale(study: optuna.Study) -> int:
    """Put trials left RUNNING by a dead process back in the queue in their own place; how many.

    The trial keeps its number and whatever parameters it had drawn (Optuna returns a stored
    parameter instead of sampling it again), and the next ``ask`` pops the lowest-numbered waiting
    trial, so it is retried before any later trial: the history the sampler sees, the trial's
    training seeds (derived from its number) and the order of the record equal an uninterrupted
    run's. Failing it and enqueueing a copy instead would put the copy behind the queued Sobol
    points under a new number.

    Only safe when no other worker shares the study: the journal storage, called by the one
    process that opens the run before any ``--workers`` start. Database storage uses heartbeats.
    """
    stale = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
    for t in stale:
        count = int(t.user_attrs.get(INTERRUPTIONS_ATTR, 0)) + 1
        study._storage.set_trial_user_attr(t._trial_id, INTERRUPTIONS_ATTR, count)
        _forget_pending_point(study, t)
        study._storage.set_trial_state_values(t._trial_id, TrialState.WAITING)
    return len(stale)


#: System attribute in which Optuna keeps an enqueued trial's parameters (``Study.enqueue_trial``).
FIXED_PARAMS_ATTR = "fixed_params"


def params_fixed(trial: FrozenTrial, space: Mapping[str, SearchDim]) -> bool:
    """Whether every parameter of ``space`` is already decided for ``trial`` (enqueued, or written
    before an interruption), so that asking it draws nothing from the sampler."""
    return set(space) <= set(trial.system_attrs.get(FIXED_PARAMS_ATTR, {})) | set(trial.params)


#: Prefix of the system attributes in which Optuna's GPSampler stores the point it drew for a
#: trial, before the trial's parameters are written one by one (optuna/samplers/_gp/sampler.py).
GP_POINT_ATTR = "gp:relative_params"


def _forget_pending_point(study: optuna.Study, trial: FrozenTrial) -> None:
    """Blank the GP point stored on a trial killed before all its parameters were written.

    GPSampler treats a RUNNING trial with a stored point as a pending evaluation and proposes away
    from it. A retried trial is RUNNING again, so without this the sampler would avoid the trial's
    own point and draw its missing parameters elsewhere: a kill between two parameter writes
    changed the resumed run's trial (seen in the random-kill test). Blanked (the storage cannot
    delete an attribute), the sampler draws the point again from the same history and seed, which
    is the point the uninterrupted run drew. A trial with all its parameters never asks again.
    """
    for key in trial.system_attrs:
        if key.startswith(GP_POINT_ATTR):
            study._storage.set_trial_system_attr(trial._trial_id, key, "")


def is_interrupted(trial: FrozenTrial) -> bool:
    """A failed trial whose process died (marked on resume, or failed by a missed heartbeat).

    Failures caused by the parameters are always told with a :data:`FAILURE_ATTR` reason; a FAIL
    without one can only come from a dead process (journal recovery or Optuna's heartbeat).
    """
    return trial.state == TrialState.FAIL and (
        bool(trial.user_attrs.get(INTERRUPTED_ATTR)) or FAILURE_ATTR not in trial.user_attrs
    )


def is_failed(trial: FrozenTrial) -> bool:
    """Failed because of its parameters: told :data:`FAILED_SCORE` (or, in a journal written
    before failures were scored, told FAIL); never a result, whatever value the study holds."""
    return FAILURE_ATTR in trial.user_attrs and trial.state in (TrialState.COMPLETE, TrialState.FAIL)


def is_result(trial: FrozenTrial) -> bool:
    """A complete trial whose value is a real mean validation score (not a failure's score)."""
    return trial.state == TrialState.COMPLETE and not is_failed(trial)


def tell_failed(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    """Tell a trial failed by its parameters: the reason kept, the sampler told :data:`FAILED_SCORE`.

    A FAIL state would be ignored by every Optuna sampler, which would then keep proposing the
    region that diverged; MLRC scored such trials 0 for Ax.
    """
    trial.set_user_attr(FAILURE_ATTR, reason)
    study.tell(trial, FAILED_SCORE)


def is_counted(trial: FrozenTrial) -> bool:
    """Counts towards ``search.n_trials``: complete, or failed because of its parameters."""
    return trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.FAIL and not is_interrupted(trial)
    )


def counted_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that count towards the budget: complete ones and ones failed by their parameters."""
    return [t for t in study.get_trials(deepcopy=False) if is_counted(t)]


def counted_in_journal(journal: Path) -> int:
    """How many trials count towards the budget in the journal file ``journal`` (0 where there is
    none): how far a stopped run's search got, read without opening its run. Reading takes no lock
    and writes nothing, so a run still writing the file may have told a trial more."""
    if not journal.exists():
        return 0
    storage = JournalStorage(JournalFileBackend(str(journal)))
    # The storage's trials directly: loading an optuna.Study per study would only wrap them.
    ids = (storage.get_study_id_from_name(s.study_name) for s in storage.get_all_studies())
    return sum(sum(map(is_counted, storage.get_all_trials(i, deepcopy=False))) for i in ids)


def _is_live(trial: FrozenTrial) -> bool:
    # Counted, or still able to become counted (queued or being trained somewhere).
    return is_counted(trial) or trial.state in (TrialState.RUNNING, TrialState.WAITING)


def budget_rank(trials: list[FrozenTrial], number: int) -> int:
    """How many live trials have a lower number than trial ``number``: its place in the budget.

    Trial numbers follow creation order in every storage, so when several workers race for the
    last places, the lower-numbered trial wins and a trial with rank >= n_trials is surplus. Every
    trial that ends up counted existed (queued, running or done) when any higher-numbered trial
    checked its rank, so the number of counted trials never exceeds ``n_trials``.
    """
    return sum(1 for t in trials if t.number < number and _is_live(t))


def budget_state(trials: list[FrozenTrial]) -> tuple[int, int, int]:
    """(counted, running, waiting) trial counts."""
    counted = sum(1 for t in trials if is_counted(t))
    running = sum(1 for t in trials if t.state == TrialState.RUNNING)
    waiting = sum(1 for t in trials if t.state == TrialState.WAITING)
    return counted, running, waiting


def best_trial(study: optuna.Study) -> FrozenTrial:
    """Highest observed objective among complete trials (MLRC's choice); failed ones never win."""
    complete = [t for t in study.get_trials(deepcopy=False) if is_result(t)]
    if not complete:
        raise ConfigError(
            "Every search trial failed (see the failure reasons in the run record); "
            "there is no best setting to retrain."
        )
    return max(complete, key=lambda t: (t.value if t.value is not None else -math.inf, -t.number))
