"""Protocols without a hyperparameter search: one fixed split, ``test.reps`` trainings, CIs.

The ``traditional`` and ``cbir`` protocols (docs/protocols.md §2.5) share the base steps (resolve,
run directory, record; :mod:`benchmark.protocol.base`) and replace MLRC's search + fold-wise test
stage by repetitions of one training with the loss's default hyperparameters (``--set loss.X=...``
fixes others). Each rep
is one file in ``runs/.../reps/``, so re-running the command after an interruption redoes only
unfinished reps. Training runs in this process (one rep after another).

A record of these protocols has the MLRC record's top-level layout, without ``search``, and a
``test`` section whose evaluation *modes* are the protocol's own (``test.modes``), e.g. ``test``
for traditional, ``brute_force``/``two_stage`` for cbir; the leaderboard reads them from there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from benchmark.analysis.convergence import convergence_summary
from benchmark.config import RunConfig
from benchmark.engine.environment import environment_info
from benchmark.engine.evaluation import interval_dict
from benchmark.engine.train import iterations_per_epoch
from benchmark.errors import DmlbenchError, TrainingDiverged
from benchmark.faults import kill_point
from benchmark.io import read_json, write_json_atomic
from benchmark.protocol.base import ProtocolRun
from benchmark.protocol.repeated_checks import check_repeated_config
from benchmark.protocol.request import COMMON_POSITIVE, positive_counts, validate_common
from benchmark.protocol.run_data import cache_dir, load_run_dataset
from benchmark.records import RecordExtras, RunRecordDoc


class RepeatedRun(ProtocolRun):
    """Base of the search-free protocols; subclasses define the split, one rep and the untrained row."""

    #: (name, label) of each evaluation mode a rep reports metrics for.
    MODES: tuple[tuple[str, str], ...] = ()
    #: Whether the training selects its checkpoint on the test data (the traditional protocol's flaw).
    SELECTION_ON_TEST = False
    #: What the per-epoch MAP@R of the progress display is computed on.
    EVAL_LABEL = "eval"

    # -- step 1 ---------------------------------------------------------------------------------
    def resolve(self) -> None:
        """The common resolution (the protocol's own checks, options it would silently ignore
        first, are its declaration's: :mod:`benchmark.protocol.repeated_checks`)."""
        super().resolve()
        self.params: dict[str, float] = self.loss_params()

    def _validate_names(self, c: RunConfig) -> None:
        validate_common(c, positive_counts(c, COMMON_POSITIVE))
        # Made by resolve already when the declaration names it (traditional, cbir); again here for a
        # plugin protocol on this class whose ProtocolSpec declares no check_config (a pure function).
        check_repeated_config(c, self.request)

    def loss_params(self) -> dict[str, float]:
        """The loss hyperparameters every rep trains with: defaults, then the user's fixed values."""
        return {**self.loss_spec.defaults, **self.fixed_params}

    # -- step 2/3 -------------------------------------------------------------------------------
    def load_data(self) -> None:
        self.dataset = load_run_dataset(self.config, cache_dir())

    #: What the split step tells the record (set by :meth:`split`).
    split_info: dict[str, Any]

    def split(self) -> None:
        """Set the protocol's train/evaluation sets and ``self.split_info`` (for the record)."""
        raise NotImplementedError

    # -- step 5 ---------------------------------------------------------------------------------
    def execute(self) -> None:
        """No search (the loss hyperparameters are fixed): the repetitions, then the untrained row."""
        with self.watch.time("test"):
            self.test_stage()
            self.untrained()

    def test_stage(self) -> None:
        """``test.reps`` trainings; finished reps are files in ``runs/.../reps/`` and are reused."""
        reps = self.config.test.reps
        self.progress.total = reps
        self.rep_results: list[dict[str, Any]] = []
        for r in range(reps):
            path = self.run_dir / "reps" / f"rep{r}.json"
            if path.exists():
                self.rep_results.append(read_json(path))
                self.progress.skip(1)
                continue
            t0 = time.perf_counter()
            try:
                rep = self.run_rep(r)
            except TrainingDiverged as exc:
                # Unlike a search trial, a repetition cannot be scored as failed and skipped: the CI needs it.
                raise DmlbenchError(
                    f"Repetition {r} diverged ({exc}) with loss parameters {self.params}; "
                    "fix another value with --set loss.NAME=VALUE."
                ) from exc
            rep["wall_s"] = round(time.perf_counter() - t0, 3)
            write_json_atomic(path, rep)
            kill_point(f"test.rep_saved:{r}")
            self.rep_results.append(rep)
            self.progress.fold_finished(rep["wall_s"])
            self.progress.status(f"rep {r + 1}/{reps} done: {self.describe_rep(rep)}", persistent=True)

    def run_rep(self, r: int) -> dict[str, Any]:
        """One training and its evaluation: ``{"rep": r, "scores": {mode: {metric: value}}, ...}``."""
        raise NotImplementedError

    def describe_rep(self, rep: dict[str, Any]) -> str:
        """One line of a rep's main results for the progress display."""
        mode = self.MODES[0][0]
        return ", ".join(f"{m} {v:.4f}" for m, v in rep["scores"][mode].items())

    def on_epoch_status(self, r: int) -> Any:
        """A per-epoch progress callback for rep ``r``."""
        reps = self.config.test.reps

        def cb(epoch: int, value: float, best: float) -> None:
            self.progress.status(
                f"rep {r + 1}/{reps} epoch {epoch}/{self.config.train.max_epochs} "
                f"{self.EVAL_LABEL} MAP@R {value:.4f} (best {best:.4f})"
            )

        return cb

    # -- step 7 ---------------------------------------------------------------------------------
    def untrained(self) -> None:
        """The reference row of the model before training (evaluated once)."""
        path = self.run_dir / "untrained.json"
        if path.exists():
            self.untrained_result = read_json(path)
            return
        self.untrained_result = self.evaluate_untrained()
        write_json_atomic(path, self.untrained_result)

    def evaluate_untrained(self) -> dict[str, dict[str, float]]:
        """``{mode: {metric: value}}`` of the untrained model."""
        raise NotImplementedError

    # -- step 8 ---------------------------------------------------------------------------------
    def extra_per_rep(self) -> dict[str, list[float]]:
        """Further per-rep quantities summarised with a CI (e.g. epochs to best, time per query)."""
        return {}

    def record_extras(self) -> RecordExtras:
        """Protocol-specific top-level record entries."""
        return {}

    def notes(self) -> list[str]:
        """Sentences the leaderboard prints under the table (protocol caveats)."""
        return []

    def build_record(self) -> RunRecordDoc:
        c = self.config
        metrics = list(c.test.metrics)
        modes = [m for m, _ in self.MODES if all(m in rep["scores"] for rep in self.rep_results)]
        per_rep = {
            mode: {m: [rep["scores"][mode][m] for rep in self.rep_results] for m in metrics} for mode in modes
        }
        summary = {
            mode: {m: interval_dict(per_rep[mode][m], c.test.confidence) for m in metrics} for mode in modes
        }
        extra = self.extra_per_rep()
        # The ignore at record_extras: with a ** item, mypy asks that every optional key come from
        # one; search is MLRC's, convergence is added below, code on writing.
        record: RunRecordDoc = {
            **self.record_header(),
            "selection_on_test": self.SELECTION_ON_TEST,
            "notes": self.notes(),
            "data": {
                "dataset_fingerprint": self.dataset.fingerprint(),
                "n_images": len(self.dataset.labels),
                "n_classes": len(self.dataset.classes()),
                **self.split_info,
            },
            "environment": environment_info(self.device),
            "training": self.training_info(),
            "test": {
                "reps": c.test.reps,
                "metrics": metrics,
                "modes": modes,
                "mode_labels": {m: label for m, label in self.MODES if m in modes},
                "per_rep": per_rep,
                "summary": summary,
                "extra_per_rep": extra,
                "extra_summary": {k: interval_dict(v, c.test.confidence) for k, v in extra.items()},
                "rep_details": self.rep_results,
            },
            "untrained": self.untrained_result,
            **self.record_extras(),  # type: ignore[typeddict-item]
            "timings_s": self.watch.timings,
            "execution": {
                "jobs": 1,
                "device": str(self.device),
                "torch_threads": torch.get_num_threads(),
            },
        }
        # Each rep is one training: why it stopped (test stage; these protocols have no search).
        record["convergence"] = convergence_summary(record)
        return record

    #: Optimiser of the trunk, embedder and loss parameters (see train.OPTIMIZERS).
    OPTIMIZER = "rmsprop"
    #: How the checkpoint a rep reports is chosen (for the record).
    SELECTION = ""

    def training_set_size(self) -> int:
        """Images one epoch passes over (an epoch is a dataset pass when iters_per_epoch = 0)."""
        raise NotImplementedError

    def training_info(self) -> dict[str, Any]:
        """How every rep trains (optimiser, batching, loss hyperparameters, checkpoint selection)."""
        c = self.config.train
        return {
            "optimizer": self.OPTIMIZER,
            "sampling": "random batches" if not self.loss_spec.pair_based else "m=4 per class",
            "iters_per_epoch": iterations_per_epoch(
                c.iters_per_epoch, self.training_set_size(), c.batch_size
            ),
            "epoch": "one pass over the training images"
            if c.iters_per_epoch == 0
            else f"{c.iters_per_epoch} iterations",
            "loss_params": self.params,
            "selection": self.SELECTION,
        }


def scores_by_mode(
    values: Mapping[str, Mapping[str, float]], metrics: list[str]
) -> dict[str, dict[str, float]]:
    """``values`` restricted to ``metrics`` in each mode, as plain floats (JSON-ready)."""
    return {mode: {m: float(v[m]) for m in metrics} for mode, v in values.items()}
