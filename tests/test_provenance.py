"""Which code trained a run: fold results carry it, a run directory refuses to resume with other
code unless asked, and a record (and its leaderboard) says when its folds mix code versions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmark.analysis.provenance import (
    CODE_FILE,
    RESUME_FLAG,
    UNRECORDED,
    check_resume_code,
    code_summary,
    code_versions,
    fold_codes,
    short_code,
)
from benchmark.engine.environment import code_identity, tree_identity
from benchmark.errors import DmlbenchError
from benchmark.protocol import base
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest
from benchmark.records import parse_record
from benchmark.report.leaderboard import write_leaderboard

OLD, NEW = "a" * 40, "b" * 40


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_tree_identity_is_the_commit_or_the_commit_and_a_hash_of_the_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "code.py").write_text("x = 1\n")
    (repo / "results" / "r.json").write_text("{}\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    sha = _git(repo, "rev-parse", "HEAD")
    assert tree_identity(repo) == sha
    # What runs write does not make the code dirty.
    (repo / "results" / "r.json").write_text('{"new": 1}\n')
    assert tree_identity(repo) == sha
    (repo / "code.py").write_text("x = 2\n")
    first_edit = tree_identity(repo)
    (repo / "code.py").write_text("x = 3\n")
    second_edit = tree_identity(repo)
    assert first_edit.startswith(f"{sha}+dirty:") and second_edit.startswith(f"{sha}+dirty:")
    assert first_edit != second_edit
    (repo / "code.py").write_text("x = 2\n")
    assert tree_identity(repo) == first_edit


def test_short_code() -> None:
    assert short_code(OLD) == "a" * 10
    assert short_code(f"{OLD}+dirty:0123456789ab") == "aaaaaaaaaa+dirty:0123456789ab"
    assert short_code("dmlbench 0.3.0") == "dmlbench 0.3.0"


def _record(search_codes: list[str | None], test_codes: list[str | None]) -> dict[str, Any]:
    def fold(code: str | None) -> dict[str, Any]:
        return {"best_val_map_at_r": 0.5} if code is None else {"best_val_map_at_r": 0.5, "code": code}

    return {
        "search": {"trials": [{"folds": [fold(c) for c in search_codes]}]},
        "test": {"rep_details": [{"folds": [fold(c) for c in test_codes]}]},
    }


def test_fold_codes_count_search_and_test_folds_by_code() -> None:
    rec = _record([OLD, OLD, NEW], [NEW, None])
    assert fold_codes(rec) == {OLD: 2, NEW: 2, UNRECORDED: 1}
    # A record without any fold code (written before fold results carried it) is one version.
    assert fold_codes(_record([None, None], [None])) == {UNRECORDED: 3}


def test_the_writer_counts_as_a_version_even_without_folds() -> None:
    rec = _record([OLD, OLD], [OLD])
    assert code_summary(rec, OLD)["mixed"] is False
    summary = code_summary(rec, NEW)
    assert summary == {"writer": NEW, "folds": {OLD: 3}, "mixed": True}
    assert code_versions({**rec, "code": summary}) == {OLD: 3, NEW: 0}


def test_a_run_directory_refuses_other_code_unless_asked(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    history = check_resume_code(run_dir, OLD, resumed=False, allow_mixed=False)
    assert [h["code"] for h in history] == [OLD]
    assert json.loads((run_dir / CODE_FILE).read_text()) == history
    # Same code: resumes, nothing appended.
    assert check_resume_code(run_dir, OLD, resumed=True, allow_mixed=False) == history
    with pytest.raises(DmlbenchError) as err:
        check_resume_code(run_dir, NEW, resumed=True, allow_mixed=False)
    assert short_code(OLD) in str(err.value) and short_code(NEW) in str(err.value)
    assert RESUME_FLAG in str(err.value)
    assert json.loads((run_dir / CODE_FILE).read_text()) == history  # a refusal writes nothing
    history = check_resume_code(run_dir, NEW, resumed=True, allow_mixed=True)
    assert [h["code"] for h in history] == [OLD, NEW]


def test_a_run_directory_from_before_code_histories_counts_as_unrecorded(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(DmlbenchError, match=UNRECORDED):
        check_resume_code(run_dir, NEW, resumed=True, allow_mixed=False)
    history = check_resume_code(run_dir, NEW, resumed=True, allow_mixed=True)
    assert [h["code"] for h in history] == [UNRECORDED, NEW]


TINY = {
    "search.n_trials": 1,
    "search.n_startup_trials": 1,
    "train.iters_per_epoch": 3,
    "train.max_epochs": 1,
    "test.reps": 2,
}


def _request(tmp_path: Path, **kw: Any) -> RunRequest:
    return RunRequest(
        loss="contrastive",
        budget="smoke",
        overrides=TINY,
        out=tmp_path / "runs",
        results_dir=tmp_path / "results",
        jobs=1,
        quiet=True,
        **kw,
    )


def test_a_run_resumed_with_other_code_is_refused_or_marked_mixed(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(cache_dir))
    first = MLRCRun(_request(tmp_path)).run().record
    here = code_identity()
    n_folds = 1 * 4 + 2 * 4  # one trial's folds and two reps' folds
    assert first["code"]["writer"] == here
    assert first["code"]["folds"] == {here: n_folds} and first["code"]["mixed"] is False
    assert not parse_record(first).commit.endswith("+mixed")

    # Other code (a new commit or local edits) finds the finished run directory.
    monkeypatch.setattr(base, "code_identity", lambda: NEW)
    with pytest.raises(DmlbenchError, match=RESUME_FLAG):
        MLRCRun(_request(tmp_path)).run()
    # The refused invocation did no work: it neither saved timings nor counts as an invocation.
    (run_dir,) = (tmp_path / "runs" / "glyphs" / "mlrc").iterdir()
    assert not (run_dir / "timings.json").exists()
    second = MLRCRun(_request(tmp_path, resume_mixed_code=True)).run().record
    # The rewritten record's timings are its own invocation's: the first one's are not in them.
    assert second["execution"]["invocations"] == 1
    assert second["execution"]["invocations_without_timings"] == 1
    # Every fold was reused: trained by the first code, written by the second.
    assert second["code"]["folds"] == {here: n_folds}
    assert second["code"]["writer"] == NEW and second["code"]["mixed"] is True
    assert [h["code"] for h in second["code"]["run_dir_history"]] == [here, NEW]
    assert parse_record(second).commit.endswith("+mixed")

    md_path, _ = write_leaderboard(tmp_path / "results", "glyphs", "mlrc")
    text = md_path.read_text()
    assert "+mixed |" in text
    assert (
        f"contrastive: mixed code: 2 code versions are behind this record (fold trainings per "
        f"version: {short_code(here)} {n_folds}, {short_code(NEW)} 0)" in text
    )
