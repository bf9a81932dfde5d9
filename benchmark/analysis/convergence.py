"""Convergence of a run (protocols.md §2.6): why each fold training stopped, and the share that stopped by
patience, for the search stage and the test stage separately.

A budget may shrink models, images and counts but must not cut training short of its early stop;
a run in which fewer than :data:`MIN_PATIENCE_SHARE` of the test-stage fold trainings stopped by
patience is "not converged" and labelled so wherever its numbers are shown. The ``smoke`` budget
(CI: checks the machinery, not the ranking) is exempt and labelled as such.

Records written before fold results carried ``stopped_by`` still load: the reason is derived from
``best_epoch``, ``epochs`` and the record's ``train`` settings by replaying the patience rule (see
:func:`derive_stop`), and the summary says that it was derived. Pure Python (no torch), so reports
can use it without importing the training stack.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

#: Why a fold training stopped; see ``benchmark.engine.train`` for what each one means.
STOP_REASONS = ("patience", "max_epochs", "diverged", "time")
#: A stop whose reason a record neither stores nor allows to derive.
UNKNOWN = "unknown"
#: Least share of test-stage fold trainings that must stop by patience for a converged run.
MIN_PATIENCE_SHARE = 0.9
#: Budgets exempt from the convergence rule (docs/protocols.md §2.6), labelled "exempt" instead.
EXEMPT_BUDGETS = frozenset({"smoke"})
STAGES = ("search", "test")

#: The rule as shown under tables and stored in records.
RULE = (
    f"a fold training converged when it stopped by patience (validation MAP@R not strictly improved "
    f"for train.patience evaluations); a run is 'not converged' when fewer than "
    f"{MIN_PATIENCE_SHARE:.0%} of its test-stage fold trainings did (docs/protocols.md §2.6); budget "
    f"{', '.join(sorted(EXEMPT_BUDGETS))} is exempt; a fixed schedule (eval_every >= max_epochs, no "
    "epoch selection by design, e.g. cbir) always stops by max_epochs"
)


def evaluation_epochs(epochs: int, max_epochs: int, eval_every: int) -> list[int]:
    """The epochs 1..``epochs`` after which the trainer validates: every ``eval_every``-th, and
    the last allowed one."""
    return [e for e in range(1, epochs + 1) if e % max(eval_every, 1) == 0 or e == max_epochs]


def derive_stop(fold: Mapping[str, Any], train: Mapping[str, Any]) -> str:
    """Why a fold training stopped, from its ``best_epoch``/``epochs`` and the ``train`` settings.

    The trainer counts, after the best evaluation, the evaluations without strict improvement and
    stops once there are ``patience`` of them; so with ``n`` evaluations after ``best_epoch``:
    ``n >= patience`` -> ``patience``; otherwise ``epochs >= max_epochs`` -> ``max_epochs``.
    Without ``best_epoch`` (cbir records), a schedule with a single evaluation
    (``eval_every >= max_epochs``) that ran to ``max_epochs`` stopped by ``max_epochs``. Anything
    else (missing settings, an inconsistent fold) is :data:`UNKNOWN`.
    """
    try:
        epochs = int(fold["epochs"])
        max_epochs, eval_every, patience = (
            int(train["max_epochs"]),
            int(train["eval_every"]),
            int(train["patience"]),
        )
    except (KeyError, TypeError, ValueError):
        return UNKNOWN
    best = fold.get("best_epoch")
    if best is None:
        if eval_every >= max_epochs and epochs == max_epochs:
            return "max_epochs"
        return UNKNOWN
    after_best = sum(1 for e in evaluation_epochs(epochs, max_epochs, eval_every) if e > int(best))
    if after_best >= patience:
        return "patience"
    if epochs >= max_epochs:
        return "max_epochs"
    return UNKNOWN


def _stop(fold: Mapping[str, Any], train: Mapping[str, Any]) -> tuple[str, bool]:
    """(reason, derived): the stored ``stopped_by`` or, for an older record, the derived one."""
    stored = fold.get("stopped_by")
    if isinstance(stored, str) and stored in STOP_REASONS:
        return stored, False
    return derive_stop(fold, train), True


def _n_folds(record: Mapping[str, Any]) -> int | None:
    n = record.get("config", {}).get("protocol", {}).get("n_folds")
    return int(n) if isinstance(n, int) else None


def stage_stops(record: Mapping[str, Any]) -> dict[str, list[tuple[str, bool]]]:
    """Per stage, (reason, derived) of every fold training in ``record``.

    Search: the folds of every trial; a trial that failed by divergence (``failure`` set, not
    interrupted) ran all its folds and kept only the finished ones, so its missing folds count as
    ``diverged``. Test: the folds of every repetition (MLRC), or each repetition itself where a
    repetition is one training (traditional, cbir).
    """
    train = record.get("config", {}).get("train", {})
    out: dict[str, list[tuple[str, bool]]] = {stage: [] for stage in STAGES}
    n_folds = _n_folds(record)
    for trial in record.get("search", {}).get("trials", []):
        folds = trial.get("folds", [])
        out["search"] += [_stop(f, train) for f in folds]
        if trial.get("failure") and not trial.get("interrupted") and n_folds is not None:
            out["search"] += [("diverged", True)] * max(0, n_folds - len(folds))
    out["test"] = [_stop(fold, train) for stage, fold in fold_trainings(record) if stage == "test"]
    return out


def fold_trainings(record: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(stage, fold result) of every fold training a record stores: the folds of each search trial,
    then those of each test repetition (MLRC), or the repetition itself where a repetition is one
    training (traditional, cbir)."""
    for trial in record.get("search", {}).get("trials", []):
        for fold in trial.get("folds", []):
            yield "search", fold
    for rep in record.get("test", {}).get("rep_details", []):
        for fold in _test_folds(rep):
            yield "test", fold


def _test_folds(rep: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if isinstance(rep.get("folds"), list):
        yield from rep["folds"]
    elif "epochs" in rep:
        yield rep


def stage_summary(stops: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """``{"n", "patience", "share", "counts", "derived"}`` of one stage's stops (share None if n = 0)."""
    counts = {reason: 0 for reason in (*STOP_REASONS, UNKNOWN)}
    for reason, _ in stops:
        counts[reason] += 1
    n = len(stops)
    return {
        "n": n,
        "patience": counts["patience"],
        "share": counts["patience"] / n if n else None,
        "counts": {k: v for k, v in counts.items() if v},
        "derived": sum(1 for _, derived in stops if derived),
    }


#: The verdicts a summary can carry, as shown in tables.
VERDICTS = ("converged", "not converged", "exempt", "fixed schedule", UNKNOWN)


def verdict(budget: str, test: Mapping[str, Any], train: Mapping[str, Any] | None = None) -> str:
    """``converged`` / ``not converged`` by :data:`MIN_PATIENCE_SHARE` of the test-stage stops;
    ``exempt`` for a budget in :data:`EXEMPT_BUDGETS`; ``fixed schedule`` when ``train`` validates
    only once, after the last epoch (``eval_every >= max_epochs``: the cbir protocol, which never
    selects an epoch, so every training stops by ``max_epochs`` by design); ``unknown`` when no
    test-stage stop is known."""
    if budget in EXEMPT_BUDGETS:
        return "exempt"
    train = train or {}
    every, most = train.get("eval_every"), train.get("max_epochs")
    if isinstance(every, int) and isinstance(most, int) and every >= most:
        return "fixed schedule"
    n, unknown = int(test.get("n", 0)), int(test.get("counts", {}).get(UNKNOWN, 0))
    if n == 0 or unknown == n:
        return UNKNOWN
    share = test.get("share")
    return "converged" if share is not None and share >= MIN_PATIENCE_SHARE else "not converged"


def convergence_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's ``convergence`` entry: per-stage summaries, the verdict and the rule."""
    stops = stage_stops(record)
    stages = {stage: stage_summary(stops[stage]) for stage in STAGES}
    return {
        **stages,
        "verdict": verdict(
            str(record.get("budget", "")), stages["test"], record.get("config", {}).get("train", {})
        ),
        "min_patience_share": MIN_PATIENCE_SHARE,
        "rule": RULE,
    }


#: The per-fold quantities :func:`stage_fold_stats` summarises, as stored in fold results.
FOLD_QUANTITIES = ("best_epoch", "epochs", "wall_s")


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def stage_fold_stats(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per stage (search, test), how long the fold trainings of ``record`` ran: ``{"n", "epochs",
    "median_best_epoch", "median_epochs", "median_wall_s"}``.

    ``n`` counts the stored fold results and ``epochs`` sums their epochs. Each median is taken over
    the folds that store the quantity (None when none does: cbir folds have no best epoch, and
    very old records no wall time). A failed trial's missing folds have no results to count."""
    values: dict[str, dict[str, list[float]]] = {stage: {q: [] for q in FOLD_QUANTITIES} for stage in STAGES}
    counts = dict.fromkeys(STAGES, 0)
    for stage, fold in fold_trainings(record):
        counts[stage] += 1
        for q in FOLD_QUANTITIES:
            v = fold.get(q)
            if isinstance(v, int | float) and not isinstance(v, bool):
                values[stage][q].append(float(v))
    return {
        stage: {
            "n": counts[stage],
            "epochs": int(sum(values[stage]["epochs"])),
            **{f"median_{q}": _median(values[stage][q]) for q in FOLD_QUANTITIES},
        }
        for stage in STAGES
    }
