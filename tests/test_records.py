"""The run record schema (benchmark.records): committed records validate, bad ones fail naming the
file and the key, records without ``kind`` migrate by the stated rule."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from record_factory import MLRC
from test_report_tables import make_record, write

from benchmark.config import Deviation
from benchmark.engine.evaluation import interval_dict
from benchmark.io import write_json_atomic
from benchmark.protocol.registry import PROTOCOLS, ProtocolSpec, register_protocol
from benchmark.records import (
    MLRC_MODES,
    RECORD_KINDS,
    SCHEMA,
    FoldDoc,
    RecordError,
    RecordTestDoc,
    RunRecordDoc,
    TrialDoc,
    _unwrap,
    load_record,
    load_records,
    parse_record,
)
from benchmark.registry import PluginSource

RESULTS = Path(__file__).resolve().parent.parent / "results"
# Every committed record: results/<dataset>/<protocol>/records and the sensitivity study's deeper ones.
COMMITTED = sorted(RESULTS.glob("**/records/*.json"))
BASE = {"map_at_r": 0.3, "precision_at_1": 0.6, "r_precision": 0.4}


def test_there_are_committed_records() -> None:
    assert len(COMMITTED) >= 10


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: "/".join(p.parts[-4:]))
def test_every_committed_record_validates(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    record = load_record(path)
    protocol = path.parent.parent.name
    assert record.kind == document["config"]["protocol"]["name"] == protocol
    if "kind" in document:  # written by a run since records carry `kind`: kept, nothing migrated
        assert record.kind == document["kind"] and record.migrated == ()
    else:  # written before: derived from config.protocol.name, and said so
        assert record.migrated == (f"no 'kind': {protocol!r} from config.protocol.name",)
    assert record.version == 1 and document["schema"] == SCHEMA
    assert record.loss == document["loss"] and record.budget == document["budget"]
    assert record.test["metrics"] == document["test"]["metrics"] and record.test["metrics"]
    mode = record.modes[0][0]
    metric = record.test["metrics"][0]
    assert record.test["summary"][mode][metric]["mean"] == document["test"]["summary"][mode][metric]["mean"]
    assert record.commit == document["environment"]["git"]["commit"][:10] + (
        "+dirty" if document["environment"]["git"]["dirty"] else ""
    ) + ("+mixed" if document.get("code", {}).get("mixed") else "")
    assert (record.search is not None) == (protocol == "mlrc")
    if record.search is not None:
        assert len(record.search["trials"]) == len(document["search"]["trials"])
        assert record.search["n_trials"] == document["search"]["n_trials"]


def _doc(**changes: Any) -> dict[str, Any]:
    record = make_record("ms", "MS", BASE, "1")
    record.update(changes)
    return record


def test_explicit_kind_is_kept_and_not_migrated() -> None:
    record = parse_record(_doc(kind="mlrc"))
    assert record.kind == "mlrc" and record.migrated == ()
    assert record.modes == (("separated", "Sep."), ("concatenated", "Concat."))


def test_old_record_without_kind_or_schema_migrates() -> None:
    named = _doc(config={"protocol": {"name": "traditional", "n_folds": 1}})
    named["test"] = {**named["test"], "modes": ["test"], "mode_labels": {"test": "Test"}}
    record = parse_record(named)
    assert record.kind == "traditional" and record.modes == (("test", "Test"),)
    assert record.migrated == ("no 'kind': 'traditional' from config.protocol.name",)
    bare = _doc(protocol="cbir", config={})
    del bare["schema"]
    bare["test"] = {**bare["test"], "modes": ["brute_force"]}
    record = parse_record(bare)
    assert (record.version, record.kind) == (1, "cbir")
    assert record.migrated == ("no 'kind': 'cbir' from protocol",)
    record = parse_record(_doc(protocol="my_mlrc_variant", config={}))
    assert record.kind == "mlrc" and record.migrated == ("no 'kind': 'mlrc' from the default protocol kind",)


def test_wrong_type_names_file_key_and_expected_type(tmp_path: Path) -> None:
    bad = _doc()
    bad["test"] = {**bad["test"], "reps": "3"}
    path = tmp_path / "ms.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(RecordError, match=rf"{path}: key 'test.reps' must be an integer, found a string"):
        load_record(path)
    bad = _doc()
    bad["test"]["summary"]["separated"]["map_at_r"]["mean"] = "high"
    with pytest.raises(RecordError, match=r"'test.summary.separated.map_at_r.mean' must be a number"):
        parse_record(bad, "x.json")
    bad = _doc(deviations=[{"paper": 1, "value": 2}])
    with pytest.raises(
        RecordError, match=r"x.json: required key 'deviations\[0\].key' \(a string\) is missing"
    ):
        parse_record(bad, "x.json")
    no_test = _doc()
    del no_test["test"]
    with pytest.raises(RecordError, match=r"required key 'test' \(an object\) is missing"):
        parse_record(no_test, "x.json")


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(
        RecordError, match=r"x.json: unknown kind 'retrieval'.*known kinds: cbir, mlrc, traditional"
    ):
        parse_record(_doc(kind="retrieval"), "x.json")
    with pytest.raises(RecordError, match="unknown kind 'nope'"):
        parse_record(_doc(config={"protocol": {"name": "nope"}}), "x.json")
    assert set(RECORD_KINDS.names()) >= {"mlrc", "traditional", "cbir"} == set(PROTOCOLS.names())


def test_a_protocol_registers_the_kind_of_its_records() -> None:
    # A protocol's records are read (report, compare) once it is registered: its registration
    # registers the record kind, and its declared modes are the ones its records may omit.
    spec = ProtocolSpec("toyrecords", lambda request: None, record_modes=(("whole", "Whole"),))
    register_protocol(spec)
    try:
        summary = {"whole": {m: {"mean": v, "half_width": 0.01} for m, v in BASE.items()}}
        doc = _doc(kind="toyrecords")
        doc["test"] = {**doc["test"], "summary": summary}
        doc["test"].pop("per_rep", None)
        record = parse_record(doc, "x.json")
        assert record.kind == "toyrecords" and record.modes == (("whole", "Whole"),)
        assert record.test["summary"]["whole"]["map_at_r"]["mean"] == 0.3
    finally:
        PROTOCOLS._items.pop(spec.name)
        RECORD_KINDS._items.pop(spec.name)


def test_a_kind_without_default_modes_must_name_them() -> None:
    with pytest.raises(
        RecordError, match=r"required key 'test.modes'.*a cbir record names its evaluation modes"
    ):
        parse_record(_doc(kind="cbir"), "x.json")


def test_future_and_foreign_schema_fail() -> None:
    with pytest.raises(
        RecordError, match=r"x.json has schema 'dmlbench.run/2', newer than .*upgrade dmlbench"
    ):
        parse_record(_doc(schema="dmlbench.run/2"), "x.json")
    with pytest.raises(RecordError, match="not a dmlbench run record"):
        parse_record(_doc(schema="other.tool/1"), "x.json")
    with pytest.raises(RecordError, match="no valid version"):
        parse_record(_doc(schema="dmlbench.run/one"), "x.json")
    with pytest.raises(RecordError, match="not a JSON object"):
        parse_record([1, 2], "x.json")


def test_unreadable_files_are_skipped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write(tmp_path, [make_record("ms", "MS", BASE, "1")])
    folder = root / "glyphs" / "mlrc" / "records"
    (folder / "truncated.json").write_text('{"loss": "x", "te')
    (folder / "list.json").write_text("[]")
    records = load_records(folder)
    assert [r.loss for r in records] == ["ms"] and records[0].test["metrics"] == MLRC
    err = capsys.readouterr().err
    assert f"skipping unreadable record {folder / 'truncated.json'}" in err
    assert f"skipping {folder / 'list.json'}: not a run record" in err


def test_git_dirty_ignores_what_runs_write_under_results(tmp_path: Path) -> None:
    """A run's own outputs (results/) leave the commit clean; a changed source file makes it dirty."""
    from conftest import committed_checkout

    from benchmark.engine.environment import git_commit

    committed_checkout(tmp_path, {"pkg/code.py": "x = 1\n", "results/leaderboard.md": "old\n"})
    (tmp_path / "results" / "leaderboard.md").write_text("new\n")
    assert git_commit(tmp_path / "pkg")["dirty"] is False
    (tmp_path / "pkg" / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path / "pkg")["dirty"] is True


def test_a_record_nested_too_deep_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.records import MAX_RECORD_DEPTH

    records = tmp_path / "glyphs" / "mlrc" / "records"
    records.mkdir(parents=True)
    bomb = records / "bomb.json"
    bomb.write_text("[" * 200_000 + "]" * 200_000)  # a RecursionError traceback before
    with pytest.raises(RecordError, match=f"{bomb} is nested deeper than {MAX_RECORD_DEPTH} levels"):
        load_record(bomb)
    shallow_enough = records / "deep.json"  # parses, but deeper than a record can be
    shallow_enough.write_text(
        json.dumps({"a": [[[[[[[[0]]]]]]]] * 10}).replace("[0]", "[" * 60 + "0" + "]" * 60)
    )
    with pytest.raises(
        RecordError, match=f"{shallow_enough} is nested deeper than {MAX_RECORD_DEPTH} levels"
    ):
        load_record(shallow_enough)
    # The leaderboard skips them with a warning, as it does a truncated file.
    assert load_records(records) == []
    err = capsys.readouterr().err
    assert (
        f"skipping unreadable record {bomb}" in err and f"skipping unreadable record {shallow_enough}" in err
    )


def test_a_record_over_the_size_limit_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmark.records

    path = tmp_path / "big.json"
    path.write_text(json.dumps({"x": "y" * 200}))
    monkeypatch.setattr(benchmark.records, "MAX_RECORD_BYTES", 100)
    with pytest.raises(RecordError, match=f"{path} is 209 bytes, over the 100-byte limit"):
        load_record(path)


# -- values, not just shapes ------------------------------------------------------------------------


def _valid_record() -> dict[str, Any]:
    return make_record("ms", "MS", {"map_at_r": 0.3, "precision_at_1": 0.6, "r_precision": 0.4}, "1")


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(mean=float("inf")), "map_at_r.mean"),
        (lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(mean=float("nan")), "map_at_r.mean"),
        (lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(mean=0.9), "map_at_r.mean"),
        (lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(half_width=0.5), "half_width"),
        (lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(half_width=-0.01), "half_width"),
        (lambda r: r["test"]["per_rep"]["separated"].update(map_at_r=[]), "test.per_rep.separated.map_at_r"),
        (lambda r: r["test"]["per_rep"]["separated"]["map_at_r"].append(float("inf")), "map_at_r[3]"),
    ],
)
def test_records_are_validated_for_values(mutate: Any, key: str, tmp_path: Path) -> None:
    """A 1e999 or NaN mean, per-rep lists that disagree with test.reps, and summaries that are not
    the intervals of their values are refused naming the key (never rendered, never bold)."""
    record = _valid_record()
    parse_record(json.loads(json.dumps(record)), "ok")  # the unchanged record is valid
    mutate(record)
    with pytest.raises(RecordError, match=re.escape(key)):
        parse_record(record, "bad")
    # Through the CLI: exit 2 with the message, no traceback.
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    (folder / "ms.json").write_text(json.dumps(record, allow_nan=True))
    from benchmark.cli.main import main

    assert main(["report", "--results-dir", str(tmp_path), "--dataset", "glyphs"]) == 2


# -- one schema for writing and reading -----------------------------------------------------------


def _typed_mlrc_record() -> RunRecordDoc:
    """A complete run record built as the writers build theirs (the schema's TypedDicts, mypy-checked,
    and the run's own helpers): every key the schema declares required, at every depth."""
    per_rep = {
        "separated": {"map_at_r": [0.30, 0.34, 0.32], "precision_at_1": [0.6, 0.62, 0.61]},
        "concatenated": {"map_at_r": [0.35, 0.37, 0.36], "precision_at_1": [0.66, 0.64, 0.65]},
    }
    plugin = PluginSource("loss", "margindev", "my_loss:M", "my_loss", "/x/my_loss.py", "ab" * 32, "d", "0.1")
    deviation = Deviation("train.max_epochs", 100, 2)
    folds: list[FoldDoc] = [
        {
            "best_val_map_at_r": 0.25,
            "best_epoch": 2,
            "epochs": 2,
            "stopped_by": "max_epochs",
            "wall_s": 0.5,
            "curve": [(1, 0.1), (2, 0.25)],
            "code": "0123456789ab",
        }
    ]
    trials: list[TrialDoc] = [
        {
            "number": k,
            "state": "COMPLETE",
            "origin": "sobol" if k == 0 else "sampler",
            "params": {"margin": 0.1 + 0.3 * k},
            "value": 0.2 + 0.1 * k,
            "sampler_value": 0.2 + 0.1 * k,
            "interruptions": 0,
            "fold_sem": None,
            "wall_s": 1.5,
            "failure": None,
            "interrupted": False,
            "folds": folds,
        }
        for k in range(2)
    ]
    return {
        "schema": SCHEMA,
        "kind": "mlrc",
        "created": "2026-11-25T07:00:00+00:00",
        "protocol": "mlrc",
        "dataset": "glyphs",
        "loss": "margindev",
        "loss_display_name": "Margin deviance",
        "embedding_space": "cosine",
        "budget": "smoke",
        "seed": 0,
        "run_dir": "runs/x",
        "config": {"protocol": {"name": "mlrc", "n_folds": 4}, "model": {"embedding_dim": 128}},
        "deviations": [{"key": deviation.key, "paper": deviation.paper, "value": deviation.value}],
        "trunk_weights": None,
        "dataset_paper_settings": {},
        "schedule": {},
        "loss_dataset_defaults": {"margin": 0.2},
        "plugins": [plugin.to_dict()],
        "data": {"n_images": 800},
        "environment": {"git": {"commit": "0123456789abcdef", "dirty": False}},
        "search": {
            "sampler": "tpe",
            "n_trials": 2,
            "space": {"margin": {"low": 0.0, "high": 0.9, "log": False}},
            "fixed": {},
            "best_trial": 1,
            "best_value": 0.3,
            "best_params": {"margin": 0.4},
            "trials": trials,
        },
        "test": {
            "reps": 3,
            "metrics": ["map_at_r", "precision_at_1"],
            "per_rep": per_rep,
            "summary": {
                mode: {m: interval_dict(v, 0.95) for m, v in values.items()}
                for mode, values in per_rep.items()
            },
            "rep_details": [],
        },
        "untrained": {"separated": {"map_at_r": 0.1}, "concatenated": {"map_at_r": 0.12}},
        "timings_s": {"search": 1.5, "test": 2.0},
        "execution": {"jobs": 1},
    }


def _written(document: object, tmp_path: Path) -> bytes:
    """``document`` as a run writes a record (benchmark.io.write_json_atomic: NaN as null, indent 1)."""
    path = tmp_path / "record.json"
    write_json_atomic(path, document)
    return path.read_bytes()


def test_a_typed_record_round_trips_through_json_and_the_reader(tmp_path: Path) -> None:
    doc = _typed_mlrc_record()
    written = _written(doc, tmp_path)
    record = load_record(tmp_path / "record.json")
    # The reader holds the writer's own type, key for key: written again, the same bytes.
    assert _written(record.parsed, tmp_path) == written and record.migrated == ()
    assert record.document == json.loads(written)
    assert record.test is record.parsed["test"] and record.search is record.parsed.get("search")
    assert (record.kind, record.loss, record.budget, record.seed) == ("mlrc", "margindev", "smoke", 0)
    assert record.plugins == (PluginSource(**doc["plugins"][0]),)
    assert record.deviations == (Deviation("train.max_epochs", 100, 2),)
    assert record.modes == MLRC_MODES and not record.named_modes
    for mode, values in doc["test"]["per_rep"].items():
        for metric, reps in values.items():
            assert record.test["summary"][mode][metric] == doc["test"]["summary"][mode][metric]
            assert record.test["per_rep"][mode][metric] == reps
    assert record.search is not None and record.search["space"] == {
        "margin": {"low": 0.0, "high": 0.9, "log": False}
    }
    assert [(t["number"], t["value"], t["params"]) for t in record.search["trials"]] == [
        (t["number"], t["value"], t["params"]) for t in doc["search"]["trials"]
    ]
    assert record.search["trials"][0]["folds"][0]["curve"] == [(1, 0.1), (2, 0.25)]
    assert (record.git_commit, record.dirty, record.embedding_dim, record.n_folds) == (
        "0123456789abcdef",
        False,
        128,
        4,
    )


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: "/".join(p.parts[-4:]))
def test_a_committed_record_reads_back_as_the_bytes_a_run_wrote(path: Path, tmp_path: Path) -> None:
    """The reader's typed document of a committed record, written as a run writes records, is the
    file byte for byte: reading adds, converts and reorders nothing (a record written before
    ``kind`` only gains the required keys its writer did not write yet, as their read values)."""
    text = path.read_bytes()
    record = load_record(path)
    if "kind" in record.document:
        assert _written(record.parsed, tmp_path) == text
    else:
        added = set(record.parsed) - set(record.document)
        assert added <= RunRecordDoc.__required_keys__, added
        assert _written({k: v for k, v in record.parsed.items() if k not in added}, tmp_path) == text


def _undeclared(value: Any, annotation: Any, key: str) -> list[str]:
    """Keys of ``value`` (at any depth) that the schema annotation does not declare."""
    tp, _ = _unwrap(annotation)
    args = [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, UnionType) else []
    tp = args[0] if args else tp
    if value is None or tp is Any:
        return []
    if is_typeddict(tp):
        keys = get_type_hints(tp, include_extras=True)
        out = [f"{key}.{k}" for k in value if k not in keys]
        return out + [u for k, v in value.items() if k in keys for u in _undeclared(v, keys[k], f"{key}.{k}")]
    origin, item_args = get_origin(tp), get_args(tp)
    if origin is list:
        return [u for i, v in enumerate(value) for u in _undeclared(v, item_args[0], f"{key}[{i}]")]
    if origin is dict:
        return [u for k, v in value.items() for u in _undeclared(v, item_args[1], f"{key}.{k}")]
    return []


def test_the_written_schema_covers_every_committed_record() -> None:
    """Every key of a committed record, at every depth the schema types, is declared by the schema,
    and a record written since records carry ``kind`` has every required one."""
    for path in COMMITTED:
        document = json.loads(path.read_text(encoding="utf-8"))
        assert _undeclared(document, RunRecordDoc, "") == [], path
        if "kind" in document:
            assert RunRecordDoc.__required_keys__ <= set(document), path
            assert RecordTestDoc.__required_keys__ <= set(document["test"]), path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda r: r["search"]["trials"][0].update(state=1),
            "'search.trials[0].state' must be a string, found",
        ),
        (lambda r: r["search"]["trials"][0].pop("state"), "required key 'search.trials[0].state' (a string)"),
        (
            lambda r: r["search"]["space"]["margin"].update(log="yes"),
            "'search.space.margin.log' must be a boolean",
        ),
        (
            lambda r: r["search"]["trials"][1]["folds"][0].update(curve=[[1, 2, 3]]),
            "curve[0]' must be a list of 2",
        ),
        (lambda r: r["plugins"][0].pop("ref"), "required key 'plugins[0].ref' (a string) is missing"),
        (
            lambda r: r["test"]["summary"]["separated"]["map_at_r"].update(n="3"),
            "map_at_r.n' must be an integer",
        ),
        (
            lambda r: r["loss_dataset_defaults"].update(margin="x"),
            "'loss_dataset_defaults.margin' must be a number",
        ),
        (
            lambda r: r["timings_s"].update(test="2s"),
            "'timings_s.test' must be a number or null, found a string",
        ),
        (lambda r: r.update(trunk_weights=[]), "'trunk_weights' must be an object or null, found a list"),
    ],
)
def test_every_declared_key_is_checked_on_read(mutate: Any, message: str) -> None:
    """The reader checks what the writers' types declare, at every depth (one declaration), and
    names the file and the key."""
    record = json.loads(json.dumps(_typed_mlrc_record()))
    mutate(record)
    with pytest.raises(RecordError, match=r"x\.json: .*" + re.escape(message)):
        parse_record(record, "x.json")


def test_a_partial_record_reads_with_the_declared_defaults() -> None:
    """Keys a reader relies on read as their declared defaults when a (hand-made, older) record
    lacks them; optional keys stay absent; nothing is added to the document itself."""
    doc = _doc()
    doc["search"]["trials"] = [{"state": "COMPLETE"}]
    doc["search"]["space"] = {"m": {"low": 0, "high": 1}}
    record = parse_record(doc, "x.json")
    trial = record.search["trials"][0] if record.search else None
    assert trial is not None and (trial["number"], trial["value"], trial["params"], trial["folds"]) == (
        None,
        None,
        {},
        [],
    )
    assert record.search is not None and record.search["space"]["m"] == {"low": 0, "high": 1, "log": False}
    assert "extra_summary" not in record.test and "plugins" not in record.parsed and record.plugins == ()
    assert doc["search"]["trials"] == [{"state": "COMPLETE"}]  # the input is not changed
