"""benchmarks/patience_truncation.py: the replayed patience rule matches the engine's stops, and a
shorter patience's selection is worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import load_benchmark_script

REPO = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    return load_benchmark_script("patience_truncation")


def test_the_replayed_rule_reproduces_every_committed_patience_stop() -> None:
    pt = _module()
    checked = 0
    for path in sorted((REPO / "results").glob("**/mlrc/records/*.json")):
        record = json.loads(path.read_text())
        patience = int(record["config"]["train"]["patience"])
        for _, fold in pt.fold_runs(record):
            if fold["stopped_by"] != "patience":
                continue
            stop = pt.stop_at_patience(fold["curve"], patience)
            assert (stop.best_value, stop.best_epoch, stop.epochs) == (
                fold["best_val_map_at_r"],
                fold["best_epoch"],
                fold["epochs"],
            ), path
            checked += 1
    assert checked > 1000  # the committed boards and the sensitivity runs


def test_a_shorter_patience_by_hand() -> None:
    pt = _module()
    curve = [[1, 0.30], [2, 0.40], [3, 0.35], [4, 0.38], [5, 0.45], [6, 0.41], [7, 0.42], [8, 0.43]]
    # Patience 3: 0.45 at epoch 5, then 3 validations without a strict improvement: stop at 8.
    assert pt.stop_at_patience(curve, 3) == pt.Stop(0.45, 5, 8)
    # Patience 2: after 0.40 at epoch 2, epochs 3 and 4 do not improve: stop at 4, keep epoch 2.
    assert pt.stop_at_patience(curve, 2) == pt.Stop(0.40, 2, 4)
    # Patience 1: epoch 3 does not improve on epoch 2.
    assert pt.stop_at_patience(curve, 1) == pt.Stop(0.40, 2, 3)
    folds = [{"curve": curve[:8], "stopped_by": "patience"}]
    (p1, p2) = pt.truncations(folds, 3)
    assert p2.patience == 2
    assert p2.drop_points == pytest.approx(5.0)  # 0.45 - 0.40
    assert p2.changed_share == 1.0
    assert p2.epoch_fraction == pytest.approx(4 / 8)
    assert p1.epoch_fraction == pytest.approx(3 / 8)


def test_an_equal_value_is_not_an_improvement() -> None:
    pt = _module()
    assert pt.stop_at_patience([[1, 0.5], [2, 0.5], [3, 0.5]], 2) == pt.Stop(0.5, 1, 3)
    with pytest.raises(ValueError, match="patience must be >= 1"):
        pt.stop_at_patience([[1, 0.5]], 0)


def test_the_table_runs_on_committed_records(tmp_path: Path) -> None:
    pt = _module()
    out = tmp_path / "t.md"
    folder = REPO / "results" / "sensitivity" / "patience5" / "omniglot" / "mlrc" / "records"
    assert pt.main([str(folder), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| patience 1 | patience 2 | patience 3 | patience 4 |" in text
    assert text.count("| contrastive |") == 2  # search and test


def test_the_jsonl_form_reads_fold_convergence_lines(tmp_path: Path) -> None:
    pt = _module()
    curve = [[1, 0.30], [2, 0.40], [3, 0.35], [4, 0.38], [5, 0.45], [6, 0.41], [7, 0.42], [8, 0.43]]
    line = {
        "dataset": "omniglot",
        "loss": "contrastive",
        "fold": 0,
        "seed": 0,
        "patience": 3,
        "eval_every": 1,
        "iters_per_epoch": 50,
        "stopped_by": "patience",
        "curve": curve,
    }
    path = tmp_path / "folds.jsonl"
    path.write_text(
        json.dumps(line) + "\n" + json.dumps({**line, "fold": 1, "stopped_by": "max_epochs"}) + "\n"
    )
    out = tmp_path / "t.md"
    assert pt.main(["--folds-jsonl", str(path), "--out", str(out)]) == 0
    (row,) = [r for r in out.read_text().splitlines() if r.startswith("| omniglot | contrastive |")]
    # patience 1 keeps 0.40 (drop 5.00, 3 of 8 epochs); patience 2 the same at 4 of 8 epochs.
    assert row == (
        "| omniglot | contrastive | 3 (150 it.) | 1 of 2 | "
        "−5.00 ± 0.00; 100%; 0.38 | −5.00 ± 0.00; 100%; 0.50 |"
    )
    assert pt.main([str(tmp_path), "--folds-jsonl", str(path)]) == 2
    assert pt.main(["--folds-jsonl", str(path), "--show", "2", "--out", str(out)]) == 0
    (row,) = [r for r in out.read_text().splitlines() if r.startswith("| omniglot | contrastive |")]
    assert row.endswith("| 1 of 2 | −5.00 ± 0.00; 100%; 0.50 |")


def test_two_surveys_of_the_same_folds_compare_by_hand(tmp_path: Path) -> None:
    pt = _module()
    fold = {"dataset": "omniglot", "loss": "ms", "patience": 20, "eval_every": 1, "iters_per_epoch": 50}
    base, other = tmp_path / "omniglot.jsonl", tmp_path / "omniglot-lr.jsonl"
    base.write_text(
        "\n".join(
            json.dumps({**fold, "fold": f, "best_val_map_at_r": v, "epochs": e})
            for f, v, e in [(0, 0.50, 40), (1, 0.60, 50), (2, 0.70, 60)]
        )
    )
    other.write_text(
        "\n".join(
            json.dumps({**fold, "fold": f, "best_val_map_at_r": v, "epochs": e})
            for f, v, e in [(0, 0.52, 20), (1, 0.60, 50)]  # fold 2 not rerun: left out
        )
    )
    (row,) = [r for r in pt.compare_surveys(base, other).splitlines() if r.startswith("| omniglot | ms |")]
    # Differences +2 and 0 points: mean +1, half-width t(0.975, 1) * stdev / sqrt(2) = 12.706 * 1.
    assert row == "| omniglot | ms | 2 | +1.00 ± 12.71 | 0.75 |"
