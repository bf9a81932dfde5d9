"""Continue a finished (or interrupted) search to more trials: ``dmlbench run --extend-search DIR``.

Every suggestion of the search is a function of the run seed and the study's history alone (one
new sampler per trial, seeded by the trial's place; :meth:`SearchStage._sampler_for`), and no
sampler sees ``search.n_trials``. So the first N trials of a search of M > N trials are the N
trials of the search that stopped at N, and a longer search can start from the shorter one's
journal instead of training its trials again. Only the journal is taken: the test stage depends
on the best trial, which more trials may change, so it is run anew.

A new run directory is seeded once, before any compute: the source's ``run.json`` must equal this
run's identity in everything but ``config.search.n_trials``, which may only grow; its code
history is continued under the same rule as a resume (other code needs ``--resume-mixed-code``,
and the record then says it mixes code); ``extended_from.json`` records where the trials came
from, and the record carries it as ``execution.search_extended_from``. Torch-free.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

from benchmark.analysis.provenance import CODE_FILE, RESUME_FLAG, UNRECORDED, short_code
from benchmark.config import config_dict_hash
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.io import differing_keys, read_json, write_json_atomic
from benchmark.models.pretrained import sha256_of
from benchmark.protocol import run_lock

#: The command-line flag.
EXTEND_FLAG = "--extend-search"
#: Where a seeded run directory says what it was seeded from.
EXTEND_FILE = "extended_from.json"
#: The one identity key a source may differ in.
TRIALS_KEY = "config.search.n_trials"
JOURNAL = "study.journal"
IDENTITY = "run.json"


def check_source_dir(source: Path) -> None:
    """Refuse a source that is not a run directory with a search journal (before anything loads)."""
    missing = [name for name in (IDENTITY, JOURNAL) if not (source / name).is_file()]
    if missing:
        raise ConfigError(
            f"{EXTEND_FLAG} {source}: not a run directory with a search to extend (missing "
            f"{', '.join(missing)}). Give a run directory of the same run with fewer trials, "
            "e.g. runs/<dataset>/mlrc/<loss>-<budget>-seed<N>-<hash>."
        )


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
    """Copy ``source``'s search journal and code history into the new ``run_dir``; returns (and
    writes to ``EXTEND_FILE``) the provenance of the copied trials.

    Everything is checked before anything is written, so a refusal leaves ``run_dir`` unseeded.
    The source is locked while its journal is copied: a run still writing it is refused.
    """
    check_source_dir(source)
    source_identity = read_json(source / IDENTITY)
    conflicts = extension_conflicts(source_identity, identity)
    if conflicts:
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: that run's search cannot be this one's first trials: it "
            f"{'; '.join(conflicts)}. Only search.n_trials may differ, and only upwards."
        )
    history: list[dict[str, Any]] = (
        list(read_json(source / CODE_FILE))
        if (source / CODE_FILE).is_file()
        else [{"code": UNRECORDED, "since": None}]
    )
    if history[-1]["code"] != current_code and not allow_mixed:
        before = ", ".join(short_code(str(h["code"])) for h in history)
        raise DmlbenchError(
            f"{EXTEND_FLAG} {source}: its trials were trained by other code ({before}); this is "
            f"{short_code(current_code)}. Pass {RESUME_FLAG} to extend it anyway; the record and the "
            "leaderboard then say that its folds mix code versions."
        )
    key = run_lock.acquire(source)
    try:
        shutil.copyfile(source / JOURNAL, run_dir / JOURNAL)
        sha = sha256_of(run_dir / JOURNAL)
    finally:
        run_lock.release(key)
    source_hash = config_dict_hash(source_identity["config"])
    try:
        _restamp(run_dir / JOURNAL, source_hash, config_dict_hash(identity["config"]))
    except DmlbenchError:
        (run_dir / JOURNAL).unlink()  # refused: the run directory stays unseeded
        raise
    timings = source / "timings.json"
    provenance: dict[str, Any] = {
        "run_dir": str(source.resolve()),
        "config_hash": source_hash,
        "n_trials": source_identity["config"]["search"]["n_trials"],
        "journal_sha256": sha,
        "code_history": history,
        # The source's search time, which this run's timings do not include.
        "timings_s": read_json(timings) if timings.is_file() else None,
        "copied": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        # A source that was itself extended: where its first trials came from (a chain).
        "source_extended_from": extension_of(source),
    }
    write_json_atomic(run_dir / CODE_FILE, history)
    write_json_atomic(run_dir / EXTEND_FILE, provenance)
    return provenance


def _restamp(journal: Path, source_hash: str, target_hash: str) -> None:
    """Make the copied study name this run's config: the search stage refuses a study stamped with
    another config hash (:func:`benchmark.search.storage.open_shared_study`)."""
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
    study.set_user_attr(IDENTITY_ATTR, {**stored, "config_hash": target_hash})


def check_resumed_extension(run_dir: Path, source: Path | None) -> None:
    """Refuse ``--extend-search`` on a run directory that already has its own search, unless it was
    seeded from the same source (then the flag repeats what is already done)."""
    if source is None:
        return
    path = run_dir / EXTEND_FILE
    if path.is_file() and Path(read_json(path)["run_dir"]) == source.resolve():
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
