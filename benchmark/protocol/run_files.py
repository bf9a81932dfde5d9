"""A run directory's name and files, said once for the run that writes them and for the tools
that read how far a stopped run got (``benchmarks/regenerate_boards.py`` plans with them before
any torch loads)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.config import config_dict_hash

#: The search's optuna journal inside a run directory (the study a resumed run reopens).
JOURNAL = "study.journal"


def run_dir_name(identity: Mapping[str, Any]) -> str:
    """The run directory's name of a run whose ``run.json`` is ``identity``: loss, budget, seed and
    the config's hash (runs of different configs never share a directory)."""
    config_hash = config_dict_hash(identity["config"])
    return f"{identity['loss']}-{identity['budget']}-seed{identity['seed']}-{config_hash}"


def rep_result_file(run_dir: Path, rep: int) -> Path:
    """Where a finished test repetition's result is saved."""
    return run_dir / "test" / f"rep{rep}.json"


def fold_result_files(run_dir: Path, rep: int, fold: int) -> tuple[Path, Path]:
    """Where one test-stage fold training saves its test embeddings and its result (a fold with
    both files is reused by a resumed run)."""
    stem = run_dir / "test" / f"rep{rep}-fold{fold}"
    return stem.with_suffix(".npy"), stem.with_suffix(".json")


def saved_test_folds(run_dir: Path, reps: int, n_folds: int) -> int:
    """How many of the test stage's ``reps`` × ``n_folds`` fold trainings a resumed run reuses: all
    folds of a saved repetition, and the folds of an unfinished one with both files saved."""
    saved = 0
    for r in range(reps):
        if rep_result_file(run_dir, r).exists():
            saved += n_folds
            continue
        saved += sum(all(p.exists() for p in fold_result_files(run_dir, r, f)) for f in range(n_folds))
    return saved
