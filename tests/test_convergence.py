"""Why a fold training stopped (``stopped_by``), the convergence shares of a record, and how the
leaderboard shows them (docs/protocols.md §2.6)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from record_factory import run_record

import benchmark.engine.train as train_module
from benchmark.analysis.convergence import convergence_summary, derive_stop, stage_fold_stats
from benchmark.budgets import BUDGETS
from benchmark.cli.main import main
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data.base import ImageDataset
from benchmark.engine.train import FoldResult, train_with_loss
from benchmark.report.leaderboard import write_leaderboard
from benchmark.report.tables import leaderboard_data, render_latex, select_records

CPU = torch.device("cpu")


# -- the training loop ----------------------------------------------------------------------------


def _config(**overrides: Any) -> RunConfig:
    user = {
        "train.batch_size": 16,
        "train.iters_per_epoch": 2,
        "train.max_epochs": 6,
        "train.eval_every": 1,
        "train.patience": 2,
        **overrides,
    }
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("smoke").overrides, user)
    return config


def _toy(n_classes: int = 12, per_class: int = 6) -> tuple[ImageDataset, ImageDataset]:
    rng = np.random.default_rng(1)
    images = torch.from_numpy(rng.integers(0, 256, (n_classes * per_class, 1, 28, 28), dtype=np.uint8))
    data = ImageDataset("toy", images, np.repeat(np.arange(n_classes, dtype=np.int64), per_class))
    classes = data.classes()
    return data.subset(classes[:8].tolist()), data.subset(classes[8:].tolist())


def _train_with_validation(
    monkeypatch: pytest.MonkeyPatch, values: list[float], untrained: float = 0.0, **kw: Any
) -> tuple[FoldResult, list[int]]:
    """Train a toy fold whose validation MAP@R is ``untrained`` at epoch 0 (the MLRC loop validates
    the model before training; below every value here, so it is never the best) and then follows
    ``values``; also return the numbers of the validations after training epochs (1, 2, ...)."""
    validates_untrained = kw.get("validate_untrained", True)
    seq: Iterator[float] = iter([untrained, *values] if validates_untrained else values)
    calls: list[int] = []

    def fake_evaluate(
        emb: np.ndarray, labels: np.ndarray, space: str, metrics: list[str], **_: object
    ) -> dict[str, float]:
        calls.append(len(calls) + (0 if validates_untrained else 1))
        return {"map_at_r": next(seq)}

    monkeypatch.setattr(train_module, "evaluate", fake_evaluate)
    train, val = _toy()
    result, _, _ = train_with_loss(
        config=kw.pop("config", _config()),
        loss_name="contrastive",
        loss_params={},
        train=train,
        val=val,
        augment=None,
        seed=3,
        device=CPU,
        **kw,
    )
    return result, [c for c in calls if c > 0]


def test_flat_validation_stops_by_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    # Best at epoch 2, then a tie (not a strict improvement) and a drop: patience 2 runs out at 4.
    result, calls = _train_with_validation(monkeypatch, [0.3, 0.5, 0.5, 0.4, 0.9, 0.9])
    assert result.stopped_by == "patience"
    assert (result.best_epoch, result.epochs, len(calls)) == (2, 4, 4)
    assert result.to_dict()["stopped_by"] == "patience"
    assert derive_stop(result.to_dict(), {"max_epochs": 6, "eval_every": 1, "patience": 2}) == "patience"


def test_rising_validation_stops_by_max_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _train_with_validation(monkeypatch, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert (result.stopped_by, result.best_epoch, result.epochs) == ("max_epochs", 6, 6)
    assert derive_stop(result.to_dict(), {"max_epochs": 6, "eval_every": 1, "patience": 2}) == "max_epochs"


def test_patience_running_out_at_the_last_epoch_counts_as_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _train_with_validation(
        monkeypatch, [0.1, 0.5, 0.4, 0.3], config=_config(**{"train.max_epochs": 4})
    )
    assert (result.stopped_by, result.best_epoch, result.epochs) == ("patience", 2, 4)


def test_time_limit_stops_at_the_first_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _train_with_validation(monkeypatch, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], time_limit_s=0.0)
    assert (result.stopped_by, result.epochs, len(calls)) == ("time", 1, 1)


def test_single_validation_schedule_stops_by_max_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cbir protocol's schedule (eval_every = max_epochs, no epoch-0 candidate): patience can never fire.
    config = _config(**{"train.max_epochs": 3, "train.eval_every": 3, "train.patience": 1})
    result, calls = _train_with_validation(monkeypatch, [0.2], config=config, validate_untrained=False)
    assert (result.stopped_by, result.epochs, len(calls)) == ("max_epochs", 3, 1)


def test_fold_result_rejects_an_unknown_reason() -> None:
    with pytest.raises(ValueError, match="stopped_by"):
        FoldResult(0.5, 1, 1, 0.1, [], "bored")


# -- derivation for records written before stopped_by ---------------------------------------------

TRAIN = {"max_epochs": 10, "eval_every": 2, "patience": 2}


@pytest.mark.parametrize(
    ("fold", "expected"),
    [
        # Evaluations at 2, 4, 6: two after the best (2) -> patience, whatever the cap.
        ({"best_epoch": 2, "epochs": 6}, "patience"),
        # Evaluations at 2..10 with the last one best: the cap ended it.
        ({"best_epoch": 10, "epochs": 10}, "max_epochs"),
        # One evaluation after the best at the cap: too few for patience 2.
        ({"best_epoch": 8, "epochs": 10}, "max_epochs"),
        # Stopped early with too few evaluations after the best: no rule explains it.
        ({"best_epoch": 4, "epochs": 6}, "unknown"),
        ({"epochs": 10}, "unknown"),  # no best epoch, several evaluations
        ({"best_epoch": 2}, "unknown"),
    ],
)
def test_derive_stop(fold: dict[str, int], expected: str) -> None:
    assert derive_stop(fold, TRAIN) == expected


def test_derive_stop_without_best_epoch_on_a_fixed_schedule() -> None:
    fixed = {"max_epochs": 8, "eval_every": 8, "patience": 5}
    assert derive_stop({"epochs": 8}, fixed) == "max_epochs"
    assert derive_stop({"epochs": 8}, {"max_epochs": 8}) == "unknown"  # settings missing


# -- records and the leaderboard -------------------------------------------------------------------

METRICS = ["map_at_r"]


def _fold(stopped_by: str | None, best: int = 3, epochs: int = 3) -> dict[str, Any]:
    fold: dict[str, Any] = {"best_val_map_at_r": 0.5, "best_epoch": best, "epochs": epochs, "wall_s": 1.0}
    if stopped_by is not None:
        fold["stopped_by"] = stopped_by
    return fold


def mlrc_record(
    loss: str, display: str, test_patience: int, *, budget: str = "mini", stored: bool = True
) -> dict[str, Any]:
    """16 test folds of which ``test_patience`` stopped by patience; 3 search trials (one diverged)."""
    reasons = ["patience"] * test_patience + ["max_epochs"] * (16 - test_patience)

    def fold_for(reason: str) -> dict[str, Any]:
        if stored:
            return _fold(reason)
        # An older record: no stopped_by; best epoch 1 of 3 (two evaluations after it) is a
        # patience stop under patience 2, best epoch 3 of 3 is the cap.
        return _fold(None, best=1 if reason == "patience" else 3)

    reps = [{"rep": r, "folds": [fold_for(x) for x in reasons[4 * r : 4 * r + 4]]} for r in range(4)]
    summary = {"map_at_r": {"mean": 0.3, "half_width": 0.01}}
    return run_record(
        loss,
        created=loss,
        summary={"separated": summary, "concatenated": summary},
        reps=4,
        rep_details=reps,
        display=display,
        budget=budget,
        config={"protocol": {"n_folds": 4}, "train": {"max_epochs": 3, "eval_every": 1, "patience": 2}},
        search={
            "n_trials": 3,
            "trials": [
                {"state": "COMPLETE", "folds": [fold_for("patience")] * 4},
                {"state": "COMPLETE", "folds": [fold_for("patience")] * 3 + [fold_for("max_epochs")]},
                # Fold 2 diverged: the trial failed with three finished folds.
                {
                    "state": "FAIL",
                    "failure": "fold 2: loss became nan",
                    "interrupted": False,
                    "folds": [fold_for("patience")] * 3,
                },
            ],
        },
    )


def test_record_shares_per_stage() -> None:
    c = convergence_summary(mlrc_record("ms", "MS", 14))
    assert (c["test"]["patience"], c["test"]["n"], c["test"]["share"]) == (14, 16, 14 / 16)
    assert c["test"]["counts"] == {"patience": 14, "max_epochs": 2}
    assert c["search"]["counts"] == {"patience": 10, "max_epochs": 1, "diverged": 1}
    assert (c["search"]["patience"], c["search"]["n"]) == (10, 12)
    assert c["verdict"] == "not converged"  # 87.5% < 90%
    assert convergence_summary(mlrc_record("ms", "MS", 15))["verdict"] == "converged"  # 93.75%
    assert convergence_summary(mlrc_record("ms", "MS", 0, budget="smoke"))["verdict"] == "exempt"


def test_older_records_derive_the_same_shares() -> None:
    stored = convergence_summary(mlrc_record("ms", "MS", 14))
    derived = convergence_summary(mlrc_record("ms", "MS", 14, stored=False))
    for stage in ("test", "search"):
        assert derived[stage]["counts"] == stored[stage]["counts"]
        assert stored[stage]["derived"] == (1 if stage == "search" else 0)  # the diverged fold
    assert derived["test"]["derived"] == 16 and derived["verdict"] == stored["verdict"]


def test_repeated_protocol_records() -> None:
    train = {"max_epochs": 8, "eval_every": 8, "patience": 5}
    cbir = {"budget": "mini", "config": {"train": train}, "test": {"rep_details": [{"epochs": 8}] * 3}}
    c = convergence_summary(cbir)
    assert c["test"]["counts"] == {"max_epochs": 3} and c["search"]["n"] == 0
    assert c["verdict"] == "fixed schedule"
    traditional = {
        "budget": "mini",
        "config": {"train": {"max_epochs": 8, "eval_every": 1, "patience": 3}},
        "test": {"rep_details": [{"best_epoch": 2, "epochs": 5, "stopped_by": "patience"}] * 3},
    }
    assert convergence_summary(traditional)["verdict"] == "converged"


def _write(root: Path, records: list[dict[str, Any]]) -> Path:
    folder = root / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"{r['loss']}.{r['budget']}.json").write_text(json.dumps(r))
    return root


def test_leaderboard_shows_shares_and_the_not_converged_mark(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        [
            mlrc_record("ms", "MS", 14),
            mlrc_record("arcface", "ArcFace", 16, stored=False),
            mlrc_record("mfcont", "MFCont", 2, budget="smoke"),
        ],
    )
    md_path, csv_path = write_leaderboard(root, "glyphs", "mlrc")
    md = md_path.read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| MS (not converged) |") for line in rows)
    assert any(line.startswith("| ArcFace |") for line in rows)
    assert any(line.startswith("| MFCont |") for line in rows)  # smoke: exempt, not marked
    # The shares are a column of the table (test; search), the rule a footer line.
    cell = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[-2] for line in rows}
    assert cell["ArcFace"] == "16/16 (100%)*; 10/12 (83%)*"
    assert cell["MS (not converged)"] == "14/16 (88%); 10/12 (83%)*"
    assert cell["MFCont"] == "2/16 (12%); 10/12 (83%)*"
    assert "## Budget `smoke` (exempt from the convergence rule" in md
    assert "fewer than 90% of its test-stage fold trainings" in md
    rows_csv = {(r["budget"], r["loss"]): r for r in csv.DictReader(io.StringIO(csv_path.read_text()))}
    ms = rows_csv[("mini", "ms")]
    assert (ms["test_patience_stops"], ms["test_fold_trainings"], ms["convergence"]) == (
        "14",
        "16",
        "not converged",
    )
    assert (ms["search_patience_stops"], ms["search_fold_trainings"]) == ("10", "12")
    assert rows_csv[("mini", "arcface")]["stops_derived"] == str(16 + 12)
    assert rows_csv[("mini", "untrained")]["convergence"] == ""
    by_budget = select_records(root, "glyphs", "mlrc")
    assert r"MS (not converged) & " in render_latex("glyphs", "mlrc", by_budget, METRICS)
    data = leaderboard_data("glyphs", "mlrc", by_budget, METRICS)
    mini = next(b for b in data["budgets"] if b["budget"] == "mini")
    conv = {r["loss"]: r["convergence"] for r in mini["rows"]}
    assert conv["untrained"] is None
    assert conv["ms"]["test"]["share"] == pytest.approx(14 / 16) and conv["ms"]["verdict"] == "not converged"
    assert "fewer than 90%" in data["convergence_rule"]


def test_a_row_of_several_seeds_shows_its_least_converged_seed_and_says_so(tmp_path: Path) -> None:
    """The Markdown row shows the seed with the lowest test share (and its mark) with a footer line
    saying so; the LaTeX comment lists every seed's stops, named by seed."""
    seed0 = {**mlrc_record("ms", "MS", 16), "seed": 0, "created": "a"}
    seed1 = {**mlrc_record("ms", "MS", 13), "seed": 1, "created": "b"}
    one = mlrc_record("arcface", "ArcFace", 16)
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for name, r in (("ms.mini.seed0", seed0), ("ms.mini.seed1", seed1), ("arcface.mini.seed0", one)):
        (folder / f"{name}.json").write_text(json.dumps(r))
    md_path, _ = write_leaderboard(tmp_path, "glyphs", "mlrc")
    md = md_path.read_text()
    (row,) = [line for line in md.splitlines() if line.startswith("| MS")]
    assert row.startswith("| MS (not converged) |") and " | 13/16 (81%); " in row
    assert "shows the stops of its least converged seed" in md
    tex = render_latex("glyphs", "mlrc", select_records(tmp_path, "glyphs", "mlrc"), METRICS)
    (line,) = [x for x in tex.splitlines() if "Fold trainings stopped by patience" in x]
    assert "arcface test 16/16 (100%)" in line
    assert "ms/seed0 test 16/16 (100%)" in line and "ms/seed1 test 13/16 (81%)" in line

    single = tmp_path / "single"
    _write(single, [one])
    assert "least converged seed" not in write_leaderboard(single, "glyphs", "mlrc")[0].read_text()


def test_committed_older_records_still_render() -> None:
    # The repository's own records predate stopped_by: they load and get derived shares.
    results = Path(__file__).resolve().parent.parent / "results"
    folders = sorted(p for p in results.glob("*/*/records") if any(p.glob("*.json")))
    assert folders, "no committed records to check"
    for folder in folders:
        dataset, protocol = folder.parent.parent.name, folder.parent.name
        by_budget = select_records(results, dataset, protocol)
        data = leaderboard_data(dataset, protocol, by_budget, [])
        for budget in data["budgets"]:
            for row in (r for r in budget["rows"] if r["loss"] != "untrained"):
                assert row["convergence"]["verdict"] in {"converged", "not converged", "fixed schedule"}
                assert row["convergence"]["test"]["n"] > 0


# -- the convergence table (dmlbench report --convergence) -----------------------------------------


def test_stage_fold_stats_are_medians_and_sums_over_the_stored_folds() -> None:
    record = {
        "search": {
            "trials": [
                {
                    "folds": [
                        {"best_epoch": 2, "epochs": 4, "wall_s": 1.0},
                        {"best_epoch": 9, "epochs": 11, "wall_s": 2.0},
                    ]
                },
                {"folds": [{"best_epoch": 5, "epochs": 7, "wall_s": 3.0}]},
            ]
        },
        # The second test fold has no wall time (an old record): counted, left out of that median.
        "test": {
            "rep_details": [
                {"folds": [{"best_epoch": 1, "epochs": 3, "wall_s": 0.5}, {"best_epoch": 4, "epochs": 6}]}
            ]
        },
    }
    stats = stage_fold_stats(record)
    assert stats["search"] == {
        "n": 3,
        "epochs": 4 + 11 + 7,
        "median_best_epoch": 5.0,
        "median_epochs": 7.0,
        "median_wall_s": 2.0,
    }
    assert stats["test"] == {
        "n": 2,
        "epochs": 9,
        "median_best_epoch": 2.5,
        "median_epochs": 4.5,
        "median_wall_s": 0.5,
    }
    assert stage_fold_stats({})["test"] == {
        "n": 0,
        "epochs": 0,
        "median_best_epoch": None,
        "median_epochs": None,
        "median_wall_s": None,
    }


def test_report_convergence_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ms = mlrc_record("ms", "MS", 14)
    ms["environment"]["cpu_capability"] = "AVX512"
    ms["timings_s"] = {"search": 30.0, "test": 12.5}
    for i, fold in enumerate(ms["test"]["rep_details"][0]["folds"]):
        fold.update(best_epoch=min(i + 1, 3), wall_s=10.0 * (i + 1))  # others: best 3, wall 1.0
    # Its search started from an earlier run's trials: its timings cover the extra work only.
    ms["execution"] = {"invocations": 1, "invocations_without_timings": 0,
                       "search_extended_from": {"n_trials": 10}}  # fmt: skip
    # A run SIGKILLed once: its timings miss that invocation, so its training time is a lower bound.
    cosface = mlrc_record("cosface", "CosFace", 16)
    cosface["timings_s"] = {"search": 0.5, "test": 20.0}
    cosface["execution"] = {"invocations": 1, "invocations_without_timings": 1}
    root = _write(tmp_path, [ms, mlrc_record("arcface", "ArcFace", 16), cosface])
    args = ["report", "--dataset", "glyphs", "--results-dir", str(root), "--convergence"]

    assert main(args) == 0
    md = capsys.readouterr().out
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in md.splitlines() if line.startswith("| ")}
    # Test folds: best epochs 1, 2, 3, 3 and twelve 3s -> median 3; walls 10-40 and twelve 1.0 -> 1.0.
    # Search: 11 stored folds, all best 3 of 3 epochs, wall 1.0; the failed trial's missing fold has
    # no result to count, but its stop is derived as diverged (hence the *).
    assert rows["ms"][1:8] == [
        "10/12 (83%)*",
        "14/16 (88%)",
        "not converged",
        "3 / 3",
        "1.0 / 1.0",
        str(3 * (11 + 16)),
        "+ 42",
    ]
    assert rows["ms"][8] == "AVX512" and rows["arcface"][8] == "–"  # the synthetic arcface has no CPU
    assert rows["arcface"][3] == "converged"
    assert rows["cosface"][7] == "≥ 20" and rows["arcface"][7] == "–"
    assert "`≥`: a lower bound" in md and "`+`: the extra trials and the test stage only" in md

    assert main([*args, "--format", "csv"]) == 0
    by_loss = {r["loss"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert (by_loss["ms"]["test_patience_stops"], by_loss["ms"]["test_fold_trainings"]) == ("14", "16")
    assert by_loss["ms"]["test_median_fold_wall_s"] == "1.0" and by_loss["arcface"]["training_wall_s"] == ""
    assert [by_loss[k]["invocations_without_timings"] for k in ("ms", "arcface", "cosface")] == ["0", "", "1"]
    assert [by_loss[k]["search_extended"] for k in ("ms", "arcface", "cosface")] == ["True", "False", "False"]

    assert main([*args, "--format", "tex"]) == 2
    assert "--convergence prints one table in md or csv; got --format tex" in capsys.readouterr().err


def test_committed_records_have_a_convergence_row_each(capsys: pytest.CaptureFixture[str]) -> None:
    results = Path(__file__).resolve().parent.parent / "results"
    for dataset in ("glyphs", "omniglot"):
        files = sorted((results / dataset / "mlrc" / "records").glob("*.mini.*.json"))
        assert main(["report", "--dataset", dataset, "--results-dir", str(results), "--convergence"]) == 0
        md = capsys.readouterr().out
        # One table per board-settings section (a redefined budget's earlier records are a section
        # of their own until rerun), one row per loss in each (its newest record there), whatever
        # number of seeds it has; every loss with a record has a row.
        sections = md.split("\n## ")[1:]
        assert sections
        seen: set[str] = set()
        for section in sections:
            losses = [
                line.split(" | ")[0][2:]
                for line in section.splitlines()
                if line.startswith("| ") and "---" not in line and not line.startswith("| Loss |")
            ]
            assert len(losses) == len(set(losses)), section
            seen |= set(losses)
        assert seen == {json.loads(f.read_text())["loss"] for f in files}
