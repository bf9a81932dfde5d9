"""``--extend-search``: a longer search seeded from a shorter one's journal trains only the extra
trials and ends where a longer search from scratch ends; a source that is not the same run with
fewer trials is refused before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmark import api
from benchmark.engine.environment import code_identity
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.models.pretrained import sha256_of
from benchmark.protocol import base
from benchmark.protocol.extend_search import EXTEND_FILE, extension_conflicts
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest

TINY = {
    "search.n_startup_trials": 1,
    "train.iters_per_epoch": 3,
    "train.max_epochs": 1,
    "test.reps": 2,
}


def _request(out: Path, n_trials: int, more: dict[str, Any] | None = None, **kw: Any) -> RunRequest:
    return RunRequest(
        budget="smoke",
        overrides={**TINY, **(more or {}), "search.n_trials": n_trials},
        out=out / "runs",
        results_dir=out / "results",
        jobs=1,
        **{"loss": "contrastive", "quiet": True, **kw},
    )


def _identity(n_trials: int, **config: Any) -> dict[str, Any]:
    return {
        "protocol": "mlrc",
        "loss": "contrastive",
        "seed": 0,
        "config": {"search": {"n_trials": n_trials}, **config},
    }


def test_only_the_trial_count_may_differ_and_only_upwards() -> None:
    assert extension_conflicts(_identity(2), _identity(3)) == []
    assert extension_conflicts(_identity(3), _identity(3)) == []
    assert extension_conflicts(_identity(4), _identity(3)) == ["search.n_trials 4 exceeds this run's 3"]
    assert extension_conflicts(_identity(2, train={"patience": 2}), _identity(3, train={"patience": 5})) == [
        "differs in config.train.patience"
    ]
    other_seed = {**_identity(2), "seed": 1}
    assert extension_conflicts(other_seed, _identity(3)) == ["differs in seed"]


def test_an_extended_search_trains_only_the_extra_trials_and_ends_as_a_longer_one(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLBENCH_CACHE", str(cache_dir))
    short_run = MLRCRun(_request(tmp_path / "short", 2))
    short = short_run.run().record
    extended_run = MLRCRun(_request(tmp_path / "extended", 3, extend_search=short_run.run_dir))
    extended = extended_run.run().record
    fresh = MLRCRun(_request(tmp_path / "fresh", 3)).run().record

    # The short search's trials are taken as they are (their wall times too: not trained again).
    assert extended["search"]["trials"][:2] == short["search"]["trials"]

    # And every trial, the extra one included, is what a 3-trial search from scratch finds.
    def points(record: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(t["number"], t["params"], t["value"]) for t in record["search"]["trials"]]

    assert points(extended) == points(fresh) and len(points(fresh)) == 3
    assert extended["test"]["summary"] == fresh["test"]["summary"]
    origin = extended["execution"]["search_extended_from"]
    assert origin["run_dir"] == str(short_run.run_dir.resolve()) and origin["n_trials"] == 2
    assert origin == json.loads((extended_run.run_dir / EXTEND_FILE).read_text())
    assert "search_extended_from" not in fresh["execution"]

    assert origin["source_extended_from"] is None
    # Extending an extended search keeps the chain: the record names both sources.
    longer = MLRCRun(_request(tmp_path / "longer", 4, extend_search=extended_run.run_dir)).run().record
    assert longer["search"]["trials"][:3] == extended["search"]["trials"]
    assert longer["execution"]["search_extended_from"]["source_extended_from"] == origin

    # Run again with the flag: a resume of the seeded directory (nothing is trained or re-seeded).
    again = MLRCRun(_request(tmp_path / "extended", 3, extend_search=short_run.run_dir)).run().record
    assert again["search"]["trials"] == extended["search"]["trials"]
    # A directory with a search of its own cannot be seeded after the fact.
    with pytest.raises(DmlbenchError, match="already holds a search of its own"):
        MLRCRun(_request(tmp_path / "fresh", 3, extend_search=short_run.run_dir)).run()


@pytest.fixture
def short_run(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> MLRCRun:
    """A finished one-trial search to extend."""
    monkeypatch.setenv("DMLBENCH_CACHE", str(cache_dir))
    run = MLRCRun(_request(tmp_path / "short", 1))
    run.run()
    return run


def test_a_source_from_other_code_is_refused_unless_asked_and_leaves_nothing(
    tmp_path: Path, short_run: MLRCRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = code_identity()
    monkeypatch.setattr(base, "code_identity", lambda: "f" * 40)
    with pytest.raises(DmlbenchError, match="--resume-mixed-code"):
        MLRCRun(_request(tmp_path / "extended", 2, extend_search=short_run.run_dir)).run()
    (run_dir,) = (tmp_path / "extended" / "runs" / "glyphs" / "mlrc").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["owner.lock"]
    # Asked: the record says that code versions mix, and the history starts with the source's.
    record = (
        MLRCRun(_request(tmp_path / "extended", 2, extend_search=short_run.run_dir, resume_mixed_code=True))
        .run()
        .record
    )
    assert record["code"]["mixed"] is True
    assert [h["code"] for h in record["code"]["run_dir_history"]] == [here, "f" * 40]


def _forget_what_the_study_searches(run_dir: Path) -> None:
    """Make ``run_dir``'s journal one written before studies recorded what they search."""
    from benchmark.search.storage import SEARCH_ATTR

    journal = run_dir / "study.journal"
    lines = journal.read_text().splitlines(keepends=True)
    kept = [line for line in lines if SEARCH_ATTR not in json.loads(line).get("user_attr", {})]
    assert len(kept) == len(lines) - 1
    journal.write_text("".join(kept))


def test_a_run_directory_searched_over_other_ranges_is_refused_and_left_unseeded(
    tmp_path: Path, short_run: MLRCRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loss's default ranges are code, which run.json does not show: a journal whose trials were
    drawn from other ranges (the source's code) cannot start this search."""
    from benchmark.losses import LOSSES, SearchDim

    with monkeypatch.context() as other_code:
        other_code.setitem(LOSSES.get("contrastive").search_space, "pos_margin", SearchDim(-0.2, 3.0))
        with pytest.raises(
            DmlbenchError, match=r"created to search \{'space': \{'pos_margin': \{'low': -0\.2, 'high': 2\.0"
        ):
            MLRCRun(_request(tmp_path / "extended", 2, extend_search=short_run.run_dir)).run()
        # A journal written before studies said what they search: its trials' ranges still tell.
        _forget_what_the_study_searches(short_run.run_dir)
        with pytest.raises(DmlbenchError, match=r"trials \[0\] were drawn from other ranges"):
            MLRCRun(_request(tmp_path / "extended", 2, extend_search=short_run.run_dir)).run()
    (run_dir,) = (tmp_path / "extended" / "runs" / "glyphs" / "mlrc").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["owner.lock"]
    # Today's ranges again: the same source is taken.
    record = MLRCRun(_request(tmp_path / "extended", 2, extend_search=short_run.run_dir)).run().record
    assert record["execution"]["search_extended_from"]["n_trials"] == 1


def test_a_run_directory_with_other_fixed_parameters_is_refused_and_left_unseeded(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loss's fixed values on a dataset are code too, and a fixed parameter that is never searched
    leaves no trace in the trials' ranges: the study says what it was created to search."""
    from benchmark.losses import LOSSES

    monkeypatch.setenv("DMLBENCH_CACHE", str(cache_dir))
    with monkeypatch.context() as other_code:
        # SoftTriple's centers per class is fixed on SOP and never searched anywhere.
        other_code.setitem(LOSSES.get("softtriple").dataset_defaults, "glyphs", {"centers_per_class": 2})
        source = MLRCRun(_request(tmp_path / "short", 1, loss="softtriple"))
        source.run()
    with pytest.raises(DmlbenchError, match=r"created to search .*'fixed': \{'centers_per_class': 2\.0\}"):
        MLRCRun(_request(tmp_path / "extended", 2, loss="softtriple", extend_search=source.run_dir)).run()
    (run_dir,) = (tmp_path / "extended" / "runs" / "glyphs" / "mlrc").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["owner.lock"]


def test_a_source_of_another_configuration_is_refused(tmp_path: Path, short_run: MLRCRun) -> None:
    other = _request(tmp_path / "extended", 2, extend_search=short_run.run_dir, seed=1)
    with pytest.raises(DmlbenchError, match=r"differs in seed\. Only search\.n_trials may differ"):
        MLRCRun(other).run()


def test_a_folder_without_a_search_or_with_a_database_is_refused_before_any_compute(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"missing run\.json, study\.journal"):
        api.run("contrastive", budget="smoke", out=tmp_path / "runs", extend_search=tmp_path / "empty")
    with pytest.raises(ConfigError, match="cannot be combined with --storage"):
        api.run(
            "contrastive",
            budget="smoke",
            out=tmp_path / "runs",
            storage="sqlite:///" + str(tmp_path / "db.sqlite"),
            extend_search=tmp_path / "empty",
        )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _points(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(t["number"], t["origin"], t["params"], t["value"]) for t in record["search"]["trials"]]


def test_a_record_stands_in_for_its_deleted_run_directory(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal rebuilt from a record asks what the run's own journal would have: the sampler's
    points after the startup ones, on the same history."""
    monkeypatch.setenv("DMLBENCH_CACHE", str(cache_dir))
    two_startup = {"search.n_startup_trials": 2}
    short_run = MLRCRun(_request(tmp_path / "short", 2, two_startup))
    short = short_run.run()
    shutil.rmtree(short_run.run_dir)  # gone, as run directories of another machine are
    extended_run = MLRCRun(_request(tmp_path / "extended", 3, two_startup, extend_search=short.record_path))
    extended = extended_run.run()
    fresh = MLRCRun(_request(tmp_path / "fresh", 3, two_startup)).run().record

    assert extended.record["search"]["trials"][:2] == short.record["search"]["trials"]
    assert _points(extended.record) == _points(fresh)
    assert [t["origin"] for t in fresh["search"]["trials"]] == ["sobol", "sobol", "sampler"]
    assert extended.record["test"]["summary"] == fresh["test"]["summary"]
    origin = extended.record["execution"]["search_extended_from"]
    assert origin["record"] == str(short.record_path.resolve()) and origin["n_trials"] == 2
    assert origin["run_dir"] == short.record["run_dir"] and origin["source_extended_from"] is None
    assert origin["timings_s"] == short.record["timings_s"]

    # A record of an extended search extends again, naming both sources; the rebuilt history
    # now holds sampler trials too.
    shutil.rmtree(extended_run.run_dir)
    longer = MLRCRun(_request(tmp_path / "longer", 4, two_startup, extend_search=extended.record_path)).run()
    fresh4 = MLRCRun(_request(tmp_path / "fresh4", 4, two_startup)).run().record
    assert _points(longer.record) == _points(fresh4)
    assert longer.record["execution"]["search_extended_from"]["source_extended_from"] == origin


def test_a_record_extended_in_place_is_replaced_and_the_run_says_so(
    tmp_path: Path, short_run: MLRCRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lengthening a record's search where it lies writes the longer record over it: the run says
    so before training, and the new record names the old one's hash."""
    source = short_run.run().record_path
    old_sha = sha256_of(source)
    capsys.readouterr()
    result = MLRCRun(_request(tmp_path / "short", 2, extend_search=source, quiet=False)).run()
    said = "".join(capsys.readouterr())
    assert result.record_path == source
    assert f"this run's record will replace its source {source}" in said
    assert len(json.loads(source.read_text())["search"]["trials"]) == 2
    assert result.record["execution"]["search_extended_from"]["record_sha256"] == old_sha
    # Another results directory: nothing is replaced, and nothing said of it.
    MLRCRun(_request(tmp_path / "elsewhere", 2, extend_search=source, quiet=False)).run()
    assert "will replace" not in "".join(capsys.readouterr())


def _tampered(record_path: Path, tmp_path: Path, change: Any) -> Path:
    doc = json.loads(record_path.read_text())
    change(doc)
    out = tmp_path / "tampered.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_record_that_cannot_be_replayed_is_refused(tmp_path: Path, short_run: MLRCRun) -> None:
    record_path = short_run.run().record_path

    def interrupted(doc: dict[str, Any]) -> None:
        doc["search"]["trials"][0]["interrupted"] = True

    with pytest.raises(ConfigError, match=r"trials \[0\] are neither complete nor failed"):
        api.run(
            "contrastive",
            budget="smoke",
            out=tmp_path / "runs",
            extend_search=_tampered(record_path, tmp_path, interrupted),
        )

    def moved(doc: dict[str, Any]) -> None:
        doc["search"]["trials"][0]["params"]["pos_margin"] += 1e-9

    def widened(doc: dict[str, Any]) -> None:
        doc["search"]["space"]["pos_margin"]["high"] += 1.0

    with pytest.raises(DmlbenchError, match="not the ones this code searches"):
        MLRCRun(
            _request(tmp_path / "wider", 2, extend_search=_tampered(record_path, tmp_path, widened))
        ).run()
    with pytest.raises(DmlbenchError, match="not the Sobol points this code draws"):
        MLRCRun(
            _request(tmp_path / "extended", 2, extend_search=_tampered(record_path, tmp_path, moved))
        ).run()
    with pytest.raises(DmlbenchError, match=r"differs in seed\. Only search\.n_trials may differ"):
        MLRCRun(_request(tmp_path / "other", 2, extend_search=record_path, seed=1)).run()
    (tmp_path / "not-a-record.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"not-a-record\.json"):
        api.run(
            "contrastive",
            budget="smoke",
            out=tmp_path / "runs2",
            extend_search=tmp_path / "not-a-record.json",
        )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "runs2").exists()


def _committed_extensions() -> list[tuple[Path, Path]]:
    """(extended record, committed record of its source run) pairs among the committed records."""
    from benchmark.config import config_dict_hash

    records = sorted(Path(__file__).parents[1].glob("results/**/records/*.json"))
    docs = {path: json.loads(path.read_text()) for path in records}
    by_identity = {
        (d["loss"], d["seed"], config_dict_hash(d["config"])): path
        for path, d in docs.items()
        if "config" in d
    }
    pairs = []
    for path, d in docs.items():
        origin = d.get("execution", {}).get("search_extended_from")
        source = by_identity.get((d["loss"], d["seed"], origin["config_hash"])) if origin else None
        if source is not None:
            pairs.append((path, source))
    return pairs


@pytest.mark.parametrize("extended, source", _committed_extensions(), ids=lambda p: p.parent.parents[2].name)
def test_a_committed_record_rebuilds_the_journal_its_extension_was_seeded_with(
    extended: Path, source: Path, tmp_path: Path
) -> None:
    """Real searches: the journal rebuilt from the source run's committed record proposes the first
    extra trial that the extension (seeded from the source's run directory) trained."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from benchmark.engine.seeds import derive_seed
    from benchmark.protocol.extend_search import _journal_from_record, source_record
    from benchmark.search.study import make_sampler, space_from_document, suggest

    record = source_record(source)
    assert record.search is not None
    n = len(record.search["trials"])
    _journal_from_record(tmp_path / "journal", record)
    study = optuna.load_study(
        study_name="search", storage=JournalStorage(JournalFileBackend(str(tmp_path / "journal")))
    )
    config = record.document["config"]["search"]
    # The sampler the search stage makes for the trial asked when n trials are counted.
    study.sampler = make_sampler(
        config["sampler"], derive_seed(int(record.document["seed"]), "sampler", n), config["n_startup_trials"]
    )
    space = space_from_document(record.search["space"])
    trials = json.loads(extended.read_text())["search"]["trials"]
    assert trials[:n] == json.loads(source.read_text())["search"]["trials"]
    # The same proposal, to the last bits a host can differ in: the GP sampler fits its model with
    # torch, whose CPU kernels round differently across hosts (seen 7.5e-14 relative on a new
    # AVX-512 host, 2026-12-06). A different sampler state proposes a different point altogether.
    assert suggest(study.ask(), space) == pytest.approx(trials[n]["params"], rel=1e-9, abs=1e-12)


def test_the_committed_extensions_are_found() -> None:
    # The test above is parametrised over them: an empty list would skip it, not fail it.
    assert len(_committed_extensions()) >= 2
