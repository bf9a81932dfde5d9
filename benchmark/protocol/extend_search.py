"""Continue a finished (or interrupted) search to more trials: ``dmlbench run --extend-search DIR``.

Every suggestion of the search is a function of the run seed and the study's history alone (one
new sampler per trial, seeded by the trial's place; :meth:`SearchStage._sampler_for`), and no
sampler sees ``search.n_trials``. So the first N trials of a search of M > N trials are the N
trials of the search that stopped at N, and a longer search can start from the shorter one's
journal instead of training its trials again. Only the journal is taken: the test stage depends
on the best trial, which more trials may change, so it is run anew.

A new run directory is seeded once, before any compute: the source's ``run.json`` must equal this
run's identity in everything but ``config.search.n_trials``, which may only grow; its journal's
study must have searched the ranges and fixed parameters this run does (a loss's defaults are
code, which the identity does not show; a journal older than the study's record of them is checked
by its trials' ranges alone); its code history is continued under the same rule as a resume
(other code needs ``--resume-mixed-code``, and the record then says it mixes code);
``extended_from.json`` records where the trials came from, and the record carries it as
``execution.search_extended_from``. Torch-free.

The source may also be the shorter run's **record** (``<loss>.<budget>.seed<N>.json``), for when
its run directory is gone (run directories are git-ignored; records are committed). A record
keeps every trial's parameters, its value as the sampler was told it (JSON floats round-trip
exactly), its folds and its attributes, which is all a sampler reads of a finished trial, so the
journal rebuilt from it asks the same next trials as the run directory's journal would. Its
startup trials must be the Sobol points this code draws for its seed and space: a record whose
startup points differ (another sampler setup) is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.analysis.provenance import CODE_FILE, RESUME_FLAG, UNRECORDED, short_code
from benchmark.config import config_dict_hash
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.io import differing_keys, read_json, write_json_atomic
from benchmark.models.pretrained import sha256_of
from benchmark.protocol import run_lock
from benchmark.protocol.run_files import JOURNAL
from benchmark.records import RecordError, RunRecord, load_record, recorded_search

#: The command-line flag.
EXTEND_FLAG = "--extend-search"
#: Where a seeded run directory says what it was seeded from.
EXTEND_FILE = "extended_from.json"
#: The one identity key a source may differ in.
TRIALS_KEY = "config.search.n_trials"
IDENTITY = "run.json"

if TYPE_CHECKING:
    import optuna


def check_source(source: Path) -> None:
    """Refuse a source that is neither a run directory with a search journal nor a run record with
    search trials (before anything loads)."""
    if source.is_file():
        source_record(source)
        return
    missing = [name for name in (IDENTITY, JOURNAL) if not (source / name).is_file()]
    if missing:
        raise ConfigError(
            f"{EXTEND_FLAG} {source}: not a run directory with a search to extend (missing "
            f"{', '.join(missing)}). Give a run directory of the same run with fewer trials, "
            "e.g. runs/<dataset>/mlrc/<loss>-<budget>-seed<N>-<hash>, or its record "
            "(results/<dataset>/mlrc/records/<loss>.<budget>.seed<N>.json)."
        )


def source_record(path: Path) -> RunRecord:
    """The run record ``path``, refused unless it holds a search whose trials can be replayed:
    every trial complete or failed by its parameters, numbered 0, 1, ... in order."""
    try:
        record = load_record(path)
    except RecordError as exc:
        raise ConfigError(f"{EXTEND_FLAG} {path}: {exc}") from None
    search = record.search
    if search is None or not search["trials"]:
        raise ConfigError(
            f"{EXTEND_FLAG} {path}: this {record.protocol} record has no search trials to extend."
        )
    numbers = [t["number"] for t in search["trials"]]
    if numbers != list(range(len(numbers))):
        raise ConfigError(
            f"{EXTEND_FLAG} {path}: its trials are numbered {numbers}, not 0..{len(numbers) - 1} in "
            "order (a search shared by several processes); extend its run directory instead."
        )
    odd = [
        t["number"]
        for t in search["trials"]
        if t["interrupted"]
        or not (t["state"] == "COMPLETE" or (t["state"] == "FAIL" and t["failure"]))
        or t["sampler_value"] is None
    ]
    if odd:
        raise ConfigError(
            f"{EXTEND_FLAG} {path}: trials {odd} are neither complete nor failed by their parameters "
            "(interrupted or surplus); only finished trials can be replayed from a record. Extend "
            "its run directory instead."
        )
    return record


def run_identity(protocol: str, loss: str, budget: str, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """A run directory's identity as its ``run.json`` holds it (JSON types: tuples become lists)."""
    identity = {"protocol": protocol, "loss": loss, "budget": budget, "seed": seed, "config": config}
    return dict(json.loads(json.dumps(identity)))


def record_identity(record: RunRecord) -> dict[str, Any]:
    """The ``run.json`` identity of the run that wrote ``record``."""
    doc = record.document
    return run_identity(doc["protocol"], doc["loss"], doc["budget"], doc["seed"], doc["config"])


def extension_conflicts(source: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """Why a run with identity ``target`` cannot extend the search of ``source`` (empty: it can).

    The identities (``run.json``) must agree in every key but ``config.search.n_trials``, and the
    source's trial count must not exceed the target's.
    """
    problems = [k for k in differing_keys(source, target) if k != TRIALS_KEY]
    if problems:
        return [f"differs in {', '.join(problems[:8])}"]
    have = source["config"]["search"]["n_trials"]
    want = target["config"]["search"]["n_trials"]
    if have > want:
        return [f"search.n_trials {have} exceeds this run's {want}"]
    return []


def seed_run_dir(
    run_dir: Path, source: Path, identity: dict[str, Any], current_code: str, allow_mixed: bool
) -> dict[str, Any]:
    """Seed the new ``run_dir`` with ``source``'s search trials and code history; returns (and
    writes to ``EXTEND_FILE``) the provenance of those trials.

    ``source`` is a run directory (its journal is copied, under its run lock: a run still writing it
    is refused) or a run record (a journal is rebuilt from its trials). Everything is checked
    before anything is written, so a refusal leaves ``run_dir`` unseeded.
    """
    record: RunRecord | None = None
    if source.is_file():
        record = check_record_source(source, identity)
        source_identity = record_identity(record)
    else:
        check_source(source)
        source_identity = read_json(source / IDENTITY)
        _check_identity(source, source_identity, identity)
    history = _code_history(source, record)
    if history[-1]["code"] != current_code and not allow_mixed:
        before = ", ".join(short_code(str(h["code"])) for h in history)
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: its trials were trained by other code ({before}); this is "
            f"{short_code(current_code)}. Pass {RESUME_FLAG} to extend it anyway; the record and the "
            "leaderboard then say that its folds mix code versions."
        )
    source_hash = config_dict_hash(source_identity["config"])
    n_trials = source_identity["config"]["search"]["n_trials"]
    if record is None:
        key = run_lock.acquire(source)
        try:
            shutil.copyfile(source / JOURNAL, run_dir / JOURNAL)
            sha = sha256_of(run_dir / JOURNAL)
        finally:
            run_lock.release(key)
        try:
            _adopt_journal(run_dir / JOURNAL, source, source_hash, identity)
        except DmlbenchError:
            (run_dir / JOURNAL).unlink()  # refused: the run directory stays unseeded
            raise
        where: dict[str, Any] = {"run_dir": str(source.resolve())}
        timings_path = source / "timings.json"
        timings = read_json(timings_path) if timings_path.is_file() else None
        chain = extension_of(source)
    else:
        doc = record.document
        _journal_from_record(run_dir / JOURNAL, record)
        sha = sha256_of(run_dir / JOURNAL)
        # The record's run directory (of the machine that ran it), and the record itself.
        where = {
            "run_dir": doc.get("run_dir"),
            "record": str(source.resolve()),
            "record_sha256": sha256_of(source),
        }
        timings = record.timings_s
        chain = doc.get("execution", {}).get("search_extended_from")
    provenance: dict[str, Any] = {
        **where,
        "config_hash": source_hash,
        "n_trials": n_trials,
        "journal_sha256": sha,
        "code_history": history,
        # The source's search time, which this run's timings do not include.
        "timings_s": timings,
        "copied": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        # A source that was itself extended: where its first trials came from (a chain).
        "source_extended_from": chain,
    }
    write_json_atomic(run_dir / CODE_FILE, history)
    write_json_atomic(run_dir / EXTEND_FILE, provenance)
    return provenance


def check_record_source(source: Path, identity: dict[str, Any]) -> RunRecord:
    """The run record ``source``, refused (:class:`DmlbenchError`, naming why) unless its trials can
    be the first trials of a run with ``identity``: every check :func:`seed_run_dir` makes of a
    record but the code check (other code may extend it with ``--resume-mixed-code``). Torch-free,
    no compute: a caller may ask before deciding to extend."""
    record = source_record(source)
    _check_identity(source, record_identity(record), identity)
    _check_ranges(record, source)
    _check_startup_points(record, source)
    return record


def _check_identity(source: Path, source_identity: dict[str, Any], identity: dict[str, Any]) -> None:
    conflicts = extension_conflicts(source_identity, identity)
    if conflicts:
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: that run's search cannot be this one's first trials: it "
            f"{'; '.join(conflicts)}. Only search.n_trials may differ, and only upwards."
        )


def _code_history(source: Path, record: RunRecord | None) -> list[dict[str, Any]]:
    """The code that trained ``source``'s trials, oldest first (the run directory's history)."""
    if record is None:
        path = source / CODE_FILE
        if path.is_file():
            return list(read_json(path))
    else:
        code = record.document.get("code")
        if isinstance(code, dict) and code.get("run_dir_history"):
            return list(code["run_dir_history"])
    return [{"code": UNRECORDED, "since": None}]


def _check_ranges(record: RunRecord, source: Path) -> None:
    """Refuse a record whose search ranges or fixed parameters are not what this code searches at
    its config: a loss's default ranges are code, which the config does not show, and a journal
    rebuilt under other ranges would mix two searches (only possible with other code, i.e. with
    ``--resume-mixed-code``)."""
    from benchmark.protocol.space import searches_as_today

    if not searches_as_today(record.document):
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: its search ranges {recorded_search(record.document)} are not "
            "the ones this code searches at its config; its trials cannot be this search's first ones."
        )


def _startup_points(record: RunRecord) -> list[dict[str, float]]:
    """The Sobol startup points the run that wrote ``record`` enqueued (from its seed and space)."""
    from benchmark.engine.seeds import derive_seed
    from benchmark.search.study import sobol_points, space_from_document

    search = record.search
    assert search is not None  # source_record checked it
    space = space_from_document(search["space"])
    n_startup = record.document["config"]["search"]["n_startup_trials"]
    # The same call as benchmark.protocol.search_stage.SearchStage.run's.
    return sobol_points(space, n_startup, derive_seed(int(record.document["seed"]), "sobol"))


def _check_startup_points(record: RunRecord, source: Path) -> None:
    """Refuse a record whose Sobol trials are not the points this code enqueues for its run."""
    assert record.search is not None
    points = _startup_points(record)
    sobol = [t for t in record.search["trials"] if t["origin"] == "sobol"]
    expected = points[: len(sobol)]
    if [(t["number"], t["params"]) for t in sobol] != list(enumerate(expected)):
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: its startup trials {[t['params'] for t in sobol]} are not the "
            f"Sobol points this code draws for its seed and space ({expected}); the rebuilt search "
            "would not be the one the record ran. Extend its run directory instead."
        )


def _journal_from_record(journal: Path, record: RunRecord) -> None:
    """Write a journal holding ``record``'s trials as its run's journal held them."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState, create_trial

    from benchmark.search.storage import SEARCH_ATTR
    from benchmark.search.study import FAILURE_ATTR, INTERRUPTIONS_ATTR, distributions, space_from_document

    search = record.search
    assert search is not None
    dists = distributions(space_from_document(search["space"]))
    storage = JournalStorage(JournalFileBackend(str(journal)))
    # Left unstamped and not marked ready: the run stamps it with its own identity when it opens
    # it, as it does a study whose creator stopped before its setup (storage.open_shared_study).
    study = optuna.create_study(study_name="search", storage=storage, direction="maximize")
    study.set_user_attr(SEARCH_ATTR, recorded_search(record.document))
    for t in search["trials"]:
        attrs: dict[str, Any] = {"folds": t["folds"], "wall_s": t["wall_s"]}
        if t["origin"] == "sobol":
            attrs["origin"] = "sobol"
        if t["fold_sem"] is not None:
            attrs["fold_sem"] = t["fold_sem"]
        if t["interruptions"]:
            attrs[INTERRUPTIONS_ATTR] = t["interruptions"]
        if t["failure"] is not None:
            attrs[FAILURE_ATTR] = t["failure"]
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=t["sampler_value"],
                params=t["params"],
                distributions={k: dists[k] for k in t["params"]},
                user_attrs=attrs,
            )
        )
    # No startup point is left to queue: a run has at least as many trials as startup points
    # (benchmark.protocol.mlrc.check_mlrc_config), and only a finished run writes a record.


def _adopt_journal(journal: Path, source: Path, source_hash: str, identity: dict[str, Any]) -> None:
    """Make the copied study this run's: refuse it unless its trials were drawn from the ranges
    this run searches, then stamp it with this run's config hash (the search stage refuses a study
    stamped with another, :func:`benchmark.search.storage.open_shared_study`)."""
    # Optuna is imported here, not at the top: the flag's other checks run before it loads.
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from benchmark.search.storage import IDENTITY_ATTR, repair_torn_journal

    repair_torn_journal(journal)  # a source killed mid-write leaves a torn last line
    storage = JournalStorage(JournalFileBackend(str(journal)))
    # A run's own journal holds one study, named "search" (benchmark.protocol.search_stage.study_name).
    study = optuna.load_study(study_name="search", storage=storage)
    stored = study.user_attrs.get(IDENTITY_ATTR)
    if not isinstance(stored, dict) or stored.get("config_hash") != source_hash:
        raise DmlbenchError(
            f"{EXTEND_FLAG}: the source's study is stamped {stored!r}, not its run.json's config hash "
            f"{source_hash}; its journal does not belong to that run directory."
        )
    _check_journal_ranges(study, identity, source)
    study.set_user_attr(IDENTITY_ATTR, {**stored, "config_hash": config_dict_hash(identity["config"])})


def _check_journal_ranges(study: optuna.Study, identity: dict[str, Any], source: Path) -> None:
    """Refuse a study that searched other ranges or other fixed parameters than this run does. The
    identity cannot show them: a loss's defaults are code, not config, so a source trained by other
    code (``--resume-mixed-code``) may have searched another space, and the two searches would mix.
    The study says what it was created to search (``SEARCH_ATTR``); a journal written before it did
    is checked by its trials' ranges alone, as it keeps no fixed parameters."""
    from optuna.trial import TrialState

    from benchmark.config import config_from_mapping
    from benchmark.protocol.space import search_document, search_space
    from benchmark.search.storage import SEARCH_ATTR
    from benchmark.search.study import distributions

    config, loss = config_from_mapping(identity["config"]), str(identity["loss"])
    stored = study.user_attrs.get(SEARCH_ATTR)
    today = json.loads(json.dumps(search_document(config, loss)))
    if stored is not None and stored != today:
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: its study was created to search {stored}, not what this code "
            f"searches at this config ({today}); its trials cannot be this search's first ones."
        )
    space, _fixed = search_space(config, loss)
    want = distributions(space)
    odd = {
        t.number: t.distributions
        for t in study.trials
        if any(want.get(k) != d for k, d in t.distributions.items())
        or (t.state == TrialState.COMPLETE and set(t.distributions) != set(want))
    }
    if odd:
        first = min(odd)
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: trials {sorted(odd)} were drawn from other ranges than this "
            f"code searches at this config (trial {first}: {odd[first]}; here: {want}); its trials "
            "cannot be this search's first ones."
        )


def check_resumed_extension(run_dir: Path, source: Path | None) -> None:
    """Refuse ``--extend-search`` on a run directory that already has its own search, unless it was
    seeded from the same source (then the flag repeats what is already done)."""
    if source is None:
        return
    path = run_dir / EXTEND_FILE
    if path.is_file():
        seeded = read_json(path)
        if Path(seeded.get("record") or seeded["run_dir"]) == source.resolve():
            return
    raise DmlbenchError(
        f"{EXTEND_FLAG} {source}: run directory {run_dir} already holds a search of its own; a "
        "search can only be extended into a new run directory. Leave the flag out to resume it, "
        "or remove the directory to start it again from the shorter search."
    )


def extension_of(run_dir: Path) -> dict[str, Any] | None:
    """The provenance of the trials a run directory was seeded with, or None."""
    path = run_dir / EXTEND_FILE
    return dict(read_json(path)) if path.is_file() else None
