"""A leaderboard never ranks records made under different board settings (benchmark.records.board_settings).

While a budget's definition changes and its records are regenerated loss by loss, a budget holds
records of two settings: they get one section each (the newest settings labelled by the budget,
the others "earlier settings" with the differing keys), with no tier, bold or test across them.
Records that differ only where the rows of one board may (data folder, seed, a loss's own
parameters) stay in one section; the committed boards render byte for byte as before.
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark_script
from record_factory import SCHEMA, run_record, searched, spread

from benchmark.config import NEUTRAL_DEFAULTS
from benchmark.data.registry import DATASETS
from benchmark.errors import DmlbenchError
from benchmark.protocol.space import searches_as_today
from benchmark.records import (
    TRUNK_SHA256,
    board_key,
    board_settings,
    replicate_key,
    settings_diff,
    settings_groups,
    settings_of,
)
from benchmark.report.compare import compare_leaderboard, settings_conflicts
from benchmark.report.leaderboard import (
    Leaderboard,
    build_leaderboard,
    load_leaderboard,
    markdown_text,
    tier_footer,
)
from benchmark.report.tables import json_data, render_leaderboard

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
METRICS = ["map_at_r", "precision_at_1"]
OLD_SHA, NEW_SHA = "a" * 64, "b" * 64


def make_record(
    loss: str,
    base: float,
    created: str,
    *,
    patience: int = 2,
    sha: str = OLD_SHA,
    seed: int = 0,
    data_dir: str = "",
    loss_params: dict[str, float] | None = None,
    weights: str = "builtin:smallcnn-symbols",
) -> dict[str, Any]:
    """An MLRC record of budget ``mini`` whose per-rep values are ``base`` ± 0.01 (3 reps)."""
    return run_record(
        loss,
        created,
        per_rep=spread(dict.fromkeys(METRICS, base)),
        seed=seed,
        schema=SCHEMA,
        kind="mlrc",
        config={
            "protocol": {"name": "mlrc", "n_folds": 4},
            "data": {"dataset": "glyphs", "data_dir": data_dir, "image_size": 28},
            "model": {
                "trunk": "smallcnn",
                "pretrained": True,
                "trunk_weights": weights,
                "embedding_dim": 128,
            },
            "train": {"patience": patience, "max_epochs": 100},
            "test": {"reps": 3, "metrics": METRICS},
            "loss": loss_params or {},
            "space": {},
        },
        trunk_weights={"file": weights, "sha256": sha, "provenance": None},
        deviations=[{"key": "train.patience", "paper": 5, "value": patience}] if patience != 5 else [],
        search=searched(2),
    )


def split_records() -> list[dict[str, Any]]:
    """3 losses under the earlier settings (patience 2, old weights), 2 under the new ones (patience
    5, weights of the same name with another checksum); the earlier ones score higher."""
    return [
        make_record("arcface", 0.60, "2024-01-01T00:00:01"),
        make_record("cosface", 0.50, "2024-01-01T00:00:02"),
        make_record("triplet", 0.30, "2024-01-01T00:00:03"),
        make_record("mfcont", 0.40, "2024-02-01T00:00:01", patience=5, sha=NEW_SHA),
        make_record("ms", 0.20, "2024-02-01T00:00:02", patience=5, sha=NEW_SHA),
    ]


def write(root: Path, records: list[dict[str, Any]]) -> Path:
    folder = root / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        (folder / f"{r['loss']}.{r['budget']}.{i}.json").write_text(json.dumps(r), encoding="utf-8")
    return root


def sections_of(markdown: str) -> dict[str, str]:
    """Markdown section heading (the label in backticks) -> the section's text."""
    parts = re.split(r"^## Budget `([^`]+)`.*$", markdown, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def rows_of(section: str) -> dict[str, list[str]]:
    """Loss name -> its table cells (the untrained row left out)."""
    out = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith(("| Loss", "| Pretrained", "| Untrained")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0]] = cells
    return out


# -- board_settings -----------------------------------------------------------------------------


def test_board_settings_leave_out_what_the_rows_of_a_board_may_differ_in() -> None:
    a = make_record("arcface", 0.5, "1")
    b = make_record("triplet", 0.4, "2", seed=3, data_dir="/mnt/data", loss_params={"margin": 0.2})
    b["config"]["space"] = {"margin": {"low": 0.1, "high": 0.3}}
    assert board_settings(a) == board_settings(b)
    assert board_key(a) == board_key(b)
    assert settings_diff(a, b) == []
    settings = board_settings(a)
    assert settings["train.patience"] == 2
    assert settings[TRUNK_SHA256] == OLD_SHA
    assert not any(k.startswith(("loss", "space")) or k == "data.data_dir" for k in settings)


def test_weights_files_count_by_checksum_built_in_names_by_name_and_checksum() -> None:
    # A weights file at two paths (two machines) is one setting; its checksum is what counts.
    here = make_record("a", 0.5, "1", weights="/home/x/bn.pth")
    there = make_record("b", 0.5, "2", weights="/scratch/y/bn.pth")
    assert board_key(here) == board_key(there)
    assert board_key(here) != board_key(make_record("c", 0.5, "3", weights="/home/x/bn.pth", sha=NEW_SHA))
    # Built-in weights of one name but other bytes (regenerated) are other settings.
    old, new = make_record("a", 0.5, "1"), make_record("b", 0.5, "2", sha=NEW_SHA)
    assert [c.text for c in settings_diff(old, new)] == [f"{TRUNK_SHA256}: {'a' * 12} → {'b' * 12}"]


def test_settings_diff_names_each_differing_key_with_both_values() -> None:
    old = make_record("a", 0.5, "1")
    new = make_record("b", 0.5, "2", patience=5)
    new["config"]["train"]["lr_schedule"] = "cosine"  # a key only one of them has
    assert [c.text for c in settings_diff(old, new)] == [
        "train.lr_schedule: (absent) → cosine",
        "train.patience: 2 → 5",
    ]


def test_keys_added_later_count_only_away_from_their_neutral_value() -> None:
    # A record written before eval.knn and the pooling options existed lacks them; a run today
    # writes them at the values that reproduce the old computation: one board, one section.
    old = make_record("a", 0.5, "1")
    new = make_record("b", 0.5, "2")
    new["config"]["eval"] = {
        key.split(".")[1]: v for key, v in NEUTRAL_DEFAULTS.items() if key.startswith("eval.")
    }
    new["config"]["model"].update(
        {key.split(".")[1]: v for key, v in NEUTRAL_DEFAULTS.items() if key.startswith("model.")}
    )
    assert board_key(old) == board_key(new)
    assert settings_of(new["config"], new["trunk_weights"]) == board_settings(old)
    # Away from it, the key is a setting like any other (an approximate index is not exact search).
    new["config"]["eval"]["knn"] = "hnsw"
    assert [c.text for c in settings_diff(old, new)] == ["eval.knn: (absent) → hnsw"]


def test_replicates_always_share_board_settings() -> None:
    records = [*split_records(), make_record("arcface", 0.61, "2024-01-01T00:00:09", seed=1, data_dir="/d")]
    for r in records:
        for other in records:
            if replicate_key(r) == replicate_key(other):
                assert board_key(r) == board_key(other)
    # A loss's records with other parameters are not replicates, though on one board.
    tuned = make_record("arcface", 0.5, "3", loss_params={"margin": 0.3})
    assert replicate_key(tuned) != replicate_key(records[0])
    assert board_key(tuned) == board_key(records[0])


def test_seeds_searched_over_other_default_ranges_are_not_replicates() -> None:
    """A loss's default ranges and fixed parameters are code: a seed run after one changed has the
    same config (and board settings) as those before it, and only its ``search`` block differs."""
    before = make_record("arcface", 0.61, "1", seed=0)
    before["search"]["space"] = {"scale": {"low": 0.01, "high": 200.0, "log": True}}
    before["search"]["fixed"] = {}
    same = copy.deepcopy(before) | {"seed": 1}
    assert replicate_key(same) == replicate_key(before)
    wider = copy.deepcopy(same)
    wider["search"]["space"]["scale"]["high"] = 300.0
    refixed = copy.deepcopy(same)
    refixed["search"]["fixed"] = {"margin": 0.5}
    for other in (wider, refixed):
        assert board_key(other) == board_key(before)
        assert replicate_key(other) != replicate_key(before)


def test_settings_groups_put_the_newest_records_group_first() -> None:
    groups = settings_groups(split_records())
    assert [[r.loss for r in g] for g in groups] == [["mfcont", "ms"], ["arcface", "cosface", "triplet"]]
    assert settings_groups([]) == []


# -- the leaderboard ----------------------------------------------------------------------------


def test_a_budget_of_two_settings_gets_two_sections_never_ranked_together() -> None:
    records = split_records()
    lb = build_leaderboard("glyphs", "mlrc", {"mini": records}, METRICS)
    current, earlier = lb.sections
    assert (current.label, current.earlier) == ("mini", False)
    assert earlier.label == f"mini (earlier settings {board_key(records[0])[:6]})"
    assert [r.loss for r in current.trained] == ["mfcont", "ms"]
    assert [r.loss for r in earlier.trained] == ["arcface", "cosface", "triplet"]
    # Tiers are per section: each section's tests cover its own rows only.
    col = ("separated", "map_at_r")
    assert len(current.tiers[col].letters) == 2 and current.tiers[col].n_pairs == 1
    assert len(earlier.tiers[col].letters) == 3 and earlier.tiers[col].n_pairs == 3
    # The footer counts them: one pair is "1 pair", not "1 pairs".
    for section, n, pairs in ((current, 2, "1 pair"), (earlier, 3, "3 pairs")):
        n_best = sum(section.tiers[col].in_best_tier)
        assert f"separated MAP@R {n_best}/{n} ({pairs});" in tier_footer(section)[0]

    sections = sections_of(markdown_text(lb))
    assert list(sections) == ["mini", earlier.label]
    now, before = rows_of(sections["mini"]), rows_of(sections[earlier.label])
    assert set(now) == {"mfcont", "ms"} and set(before) == {"arcface", "cosface", "triplet"}
    # mfcont is its section's best although arcface (earlier settings) scored higher: bold and the
    # best tier are its section's alone.
    assert now["mfcont"][2].startswith("**") and now["mfcont"][1] == "a"
    assert not now["ms"][2].startswith("**")
    assert before["arcface"][2].startswith("**") and before["arcface"][1] == "a"
    # The notes: the earlier section names each differing key with both values.
    assert "train.patience: 2 → 5" in sections[earlier.label]
    assert f"{TRUNK_SHA256}: {'a' * 12} → {'b' * 12}" in sections[earlier.label]
    assert f"ranked apart in `{earlier.label}`" in sections["mini"]


def test_the_other_formats_keep_the_sections_apart() -> None:
    lb = build_leaderboard("glyphs", "mlrc", {"mini": split_records()}, METRICS)
    _, earlier = lb.sections
    rows = list(csv.DictReader(io.StringIO(render_leaderboard("csv", lb))))
    assert {r["loss"]: r["budget"] for r in rows if r["loss"] != "untrained"} == {
        "mfcont": "mini",
        "ms": "mini",
        "arcface": earlier.label,
        "cosface": earlier.label,
        "triplet": earlier.label,
    }
    data = json_data(lb)
    assert data["schema"] == "dmlbench.leaderboard/1"
    now, before = data["budgets"]
    assert (now["budget"], now["section"], now["board_settings"]["current"]) == ("mini", "mini", True)
    assert (before["budget"], before["section"]) == ("mini", earlier.label)
    assert {"key": "train.patience", "value": 2, "current": 5} in before["board_settings"][
        "differs_from_current"
    ]
    assert any("train.patience: 2 → 5" in n for n in before["notes"])
    tex = render_leaderboard("tex", lb)
    assert f"% Budget {earlier.label}" in tex and "train.patience: 2 → 5" in tex


def test_records_differing_only_in_data_dir_seed_or_loss_parameters_share_a_section() -> None:
    records = [
        make_record("arcface", 0.6, "1"),
        make_record("arcface", 0.62, "2", seed=1, data_dir="/mnt/glyphs"),
        make_record("cosface", 0.5, "3", data_dir="/other/machine", loss_params={"margin": 0.35}),
        make_record("triplet", 0.3, "4", weights="builtin:smallcnn-symbols"),
    ]
    lb = build_leaderboard("glyphs", "mlrc", {"mini": records}, METRICS)
    (section,) = lb.sections
    assert section.label == "mini" and not section.siblings
    assert [r.loss for r in section.trained] == ["arcface", "cosface", "triplet"]
    assert next(r for r in section.trained if r.loss == "arcface").seeds == (0, 1)
    text = markdown_text(lb)
    assert "earlier settings" not in text and "Board settings" not in text
    assert "section" not in json_data(lb)["budgets"][0]


def test_a_loss_run_under_both_settings_is_in_both_sections() -> None:
    records = [*split_records(), make_record("arcface", 0.45, "2024-02-01T00:00:03", patience=5, sha=NEW_SHA)]
    current, earlier = build_leaderboard("glyphs", "mlrc", {"mini": records}, METRICS).sections
    assert [r.loss for r in current.trained] == ["arcface", "mfcont", "ms"]
    assert [r.loss for r in earlier.trained] == ["arcface", "cosface", "triplet"]
    # Each section shows the loss's record of its own settings.
    assert next(r for r in current.chosen if r.loss == "arcface").created == "2024-02-01T00:00:03"
    assert next(r for r in earlier.chosen if r.loss == "arcface").created == "2024-01-01T00:00:01"


def test_report_and_readme_excerpt_over_split_records(tmp_path: Path) -> None:
    from benchmark.report.readme import excerpt

    root = write(tmp_path, split_records())
    lb = load_leaderboard(root, "glyphs", "mlrc")
    assert [s.label for s in lb.sections] == ["mini", lb.sections[1].label]
    text = excerpt(root, "glyphs", "mlrc", "mini", "map_at_r", top=5, include=())
    assert "(2 losses)" in text and "arcface" not in text
    assert "Not shown: records made under earlier board settings" in text


def test_plots_are_drawn_per_section(tmp_path: Path) -> None:
    from benchmark.report.plots import write_plots

    root = write(tmp_path, split_records())
    lb = load_leaderboard(root, "glyphs", "mlrc")
    paths = write_plots(root, "glyphs", "mlrc", leaderboard=lb, log=lambda _: None, jobs=1)
    names = {p.name for p in paths}
    slug = lb.sections[1].slug
    assert {"metrics-mini.png", f"metrics-{slug}.png"} <= names
    assert f"`<kind>-{slug}`" in (root / "glyphs" / "mlrc" / "plots" / "README.md").read_text()


# -- compare ------------------------------------------------------------------------------------


def test_compare_refuses_losses_of_different_settings_naming_them() -> None:
    lb = build_leaderboard("glyphs", "mlrc", {"mini": split_records()}, METRICS)
    with pytest.raises(DmlbenchError) as err:
        compare_leaderboard(lb, ["arcface"], ["mfcont"], "map_at_r")
    message = str(err.value)
    assert "not all run under the same board settings" in message
    assert "train.patience: 2 → 5" in message and f"{TRUNK_SHA256}: " in message
    assert "holds mfcont" in message and "holds arcface" in message
    # Within one settings group the comparison runs, on that section's rows only.
    tables = compare_leaderboard(lb, ["arcface"], None, "map_at_r")
    (label,) = tables
    assert label == lb.sections[1].label
    assert {c.loss for c in tables[label]} == {"cosface", "triplet"}
    assert settings_conflicts(lb, ["arcface", "cosface"]) == {}


def test_compare_command_over_split_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark.cli import compare_cmd

    root = write(tmp_path, split_records())

    def args(reference: str, losses: str | None) -> argparse.Namespace:
        return argparse.Namespace(
            dataset="glyphs", protocol="mlrc", reference=reference, losses=losses, metric="map_at_r",
            holm=False, no_correction=False, diff=False, alpha=0.05, format="md", budget=None,
            results_dir=root, published=False,
        )  # fmt: skip

    with pytest.raises(DmlbenchError, match=r"train\.patience: 2 → 5"):
        compare_cmd.handle(args("mfcont", "cosface"))
    assert compare_cmd.handle(args("mfcont", "ms")) == 0
    out = capsys.readouterr()
    assert "## Budget `mini`" in out.out and "earlier settings" not in out.out


# -- the committed boards -----------------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["glyphs", "omniglot"])
@pytest.mark.parametrize("protocol", ["mlrc", "cbir", "traditional"])
def test_committed_boards_render_as_committed_and_split_only_in_mlrc_mini(
    dataset: str, protocol: str, tmp_path: Path
) -> None:
    """Every committed board renders from its records byte for byte. A budget has more than one
    section only while its boards are regenerated after a redefinition (MLRC ``mini``,
    benchmarks/regenerate_boards.py)."""
    lb = _committed_board(dataset, protocol, tmp_path)
    for fmt in ("md", "csv", "tex", "json"):
        committed = (RESULTS / dataset / protocol / f"leaderboard.{fmt}").read_text(encoding="utf-8")
        assert render_leaderboard(fmt, lb) == committed, fmt
    split = [s for s in lb.sections if s.siblings]
    assert {(protocol, s.budget) for s in split} <= {("mlrc", "mini")}


@pytest.mark.parametrize("dataset", ["glyphs", "omniglot"])
def test_committed_mini_boards_lead_with_this_checkouts_settings(dataset: str, tmp_path: Path) -> None:
    """While MLRC ``mini`` is regenerated, its first section is at the settings a run of this
    checkout records: the earlier records never take the budget's own label. The settings a run
    would record come from its preflighted config, which needs the dataset's folder where the
    dataset reads files (the registry's ``requires_data_dir``; Omniglot: ../shared/data/omniglot)."""
    rb = load_benchmark_script("regenerate_boards")
    data_dirs = rb.parse_data_dirs([])
    if DATASETS.get(dataset).requires_data_dir and dataset not in data_dirs:
        looked = rb.DEFAULT_DATA_DIRS.get(dataset, "no default folder")
        pytest.skip(f"no {dataset} folder here (looked at {looked}): a run's settings cannot be preflighted")
    lb = _committed_board(dataset, "mlrc", tmp_path)
    mini = [s for s in lb.sections if s.budget == "mini"]
    today = rb.target(rb.Entry(dataset, mini[0].chosen[0].loss, 0), data_dirs, RESULTS).key
    assert not mini[0].earlier and mini[0].settings_key == today, "the board's mini rows are not today's"
    assert all(s.earlier and s.settings_key != today for s in mini[1:])


@pytest.mark.parametrize("dataset", ["glyphs", "omniglot"])
def test_committed_mini_boards_searched_todays_ranges(dataset: str, tmp_path: Path) -> None:
    """The records of a board's current ``mini`` section searched the ranges and fixed parameters
    today's code gives their loss at their config: a default range changed in code (which board
    settings cannot show) leaves them to be rerun (``benchmarks/regenerate_boards.py status``)."""
    lb = _committed_board(dataset, "mlrc", tmp_path)
    current = next(s for s in lb.sections if s.budget == "mini")
    assert current.records and not current.earlier
    stale = [f"{r.loss} seed {r.seed}" for r in current.records if not searches_as_today(r.document)]
    assert not stale, f"searched other ranges than today's code gives: {stale}"


def _committed_board(dataset: str, protocol: str, tmp_path: Path) -> Leaderboard:
    """The committed board of ``dataset``/``protocol``, loaded from a copy of its records."""
    shutil.copytree(RESULTS / dataset / protocol / "records", tmp_path / dataset / protocol / "records")
    return load_leaderboard(tmp_path, dataset, protocol, require_metric=False)


def test_a_changed_setting_in_a_committed_board_splits_it(tmp_path: Path) -> None:
    # The committed glyphs board with one record rerun under a longer patience: that record alone
    # is the current settings' section, the others are ranked apart.
    # (The records of arcface's settings group: while mini's boards are regenerated the committed
    # board holds another group too.)
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    arcface = json.loads((RESULTS / "glyphs" / "mlrc" / "records" / "arcface.mini.seed0.json").read_text())
    group = [
        p
        for p in (RESULTS / "glyphs" / "mlrc" / "records").glob("*.json")
        if board_key(json.loads(p.read_text(encoding="utf-8"))) == board_key(arcface)
    ]
    for p in group:
        shutil.copy(p, folder / p.name)
    rerun = copy.deepcopy(arcface)
    rerun["config"]["train"]["patience"] = arcface["config"]["train"]["patience"] + 3
    rerun["created"] = "2999-01-01T00:00:00"
    (folder / "arcface.mini.seed0.rerun.json").write_text(json.dumps(rerun), encoding="utf-8")
    lb = load_leaderboard(tmp_path, "glyphs", "mlrc", require_metric=False)
    current, earlier = lb.sections
    assert [r.loss for r in current.trained] == ["arcface"]
    losses = {json.loads(p.read_text(encoding="utf-8"))["loss"] for p in group}
    # The group shrinks as records are regenerated; two losses are enough to show the split.
    assert len(losses) >= 2 and len(earlier.trained) == len(losses)
    patience = arcface["config"]["train"]["patience"]
    assert [c.text for c in earlier.changes] == [f"train.patience: {patience} → {patience + 3}"]


def test_the_protocols_description_is_a_label_not_a_setting() -> None:
    from benchmark.records import board_key

    path = sorted(
        (Path(__file__).resolve().parents[1] / "results" / "omniglot" / "mlrc" / "records").glob("*.json")
    )[0]
    doc = json.loads(path.read_text())
    reworded = json.loads(json.dumps(doc))
    reworded["config"]["protocol"]["description"] = "the same protocol, described in other words"
    assert board_key(reworded) == board_key(doc)
    patience = json.loads(json.dumps(doc))
    patience["config"]["train"]["patience"] += 1
    assert board_key(patience) != board_key(doc)
