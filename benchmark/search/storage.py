"""Where a study lives: the embedded journal file in the run directory, or a shared database.

- Journal (default): ``study.journal`` in the run directory. Several local processes may share
  it (Optuna's journal backend takes a file lock per write), but there is no heartbeat, so stale
  RUNNING trials are recovered only by the one process that opens the run before any worker starts.
- Database (``--storage postgresql://...``): Optuna's RDB storage with a heartbeat; a trial whose
  process stops sending heartbeats is failed by whichever worker notices first and re-enqueued
  with the same parameters (Optuna's ``RetryHeartbeatStaleTrialCallback``; before Optuna 5.0
  ``RetryFailedTrialCallback``).

Studies are created by exactly one process (``create_study`` is atomic in both storages); that
process stores the run identity and does the one-time setup (e.g. the Sobol startup points),
then marks the study ready. Every other process waits for ``ready`` and checks the identity.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, fail_stale_trials
from optuna.storages.journal import JournalFileBackend

from benchmark.errors import ConfigError, DmlbenchError
from benchmark.search.options import DEFAULT_HEARTBEAT_S as DEFAULT_HEARTBEAT_S  # re-exported
from benchmark.search.options import check_storage_url as check_storage_url  # re-exported
from benchmark.search.options import is_database_url as is_database_url  # re-exported
from benchmark.search.options import redact_url as redact_url  # re-exported

try:  # Optuna >= 5 renamed the retry callback and its RDBStorage argument
    from optuna.storages import RetryHeartbeatStaleTrialCallback as _Retry

    _RETRY_KWARG = "heartbeat_stale_trial_callback"
except ImportError:  # pragma: no cover - Optuna 4.x
    from optuna.storages import RetryFailedTrialCallback as _Retry

    _RETRY_KWARG = "failed_trial_callback"

# The runner uses ask/tell and sends the heartbeats itself (``heartbeat`` below), which Optuna warns
# about on every ask; its heartbeat API is also marked experimental. Neither warning is actionable.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used", category=UserWarning)

IDENTITY_ATTR = "dmlbench_identity"
READY_ATTR = "dmlbench_ready"
#: The ranges and fixed hyperparameters a study was created to search (``{"space", "fixed"}`` as a
#: record's ``search`` block holds them). The identity cannot hold them: a loss's defaults are code,
#: not config. Journals written before it existed lack it.
SEARCH_ATTR = "dmlbench_search"


def repair_torn_journal(path: Path) -> str | None:
    """Cut an incomplete last line (a write killed mid-way) off a journal file; say what was done.

    The complete file is first copied to ``<name>.torn`` next to it. Returns ``None`` when the
    file is absent or intact. Only call this while no other process writes to the file.
    """
    if not path.exists():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    backup = path.with_name(path.name + ".torn")
    shutil.copy2(path, backup)
    with path.open("r+b") as fh:
        fh.truncate(keep)
        fh.flush()
    return (
        f"repaired {path.name}: dropped an incomplete last line ({len(data) - keep} bytes, written by a "
        f"process killed mid-write); the original is kept as {backup.name}"
    )


def open_storage(url: str | None, journal: Path, heartbeat_s: int) -> BaseStorage:
    """The journal file storage (``url`` is None) or an RDB storage with heartbeat and retry."""
    if url is None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(journal)))
    check_storage_url(url)
    if heartbeat_s < 1:
        raise ConfigError(f"--heartbeat must be >= 1 second, got {heartbeat_s}.")
    error: Exception | None = None
    # Several processes starting at once on a fresh database race to create Optuna's tables (a
    # unique-constraint error in all but one); the tables exist on the next attempt.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry: dict[str, Any] = {_RETRY_KWARG: _Retry(max_retry=None)}
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(
                    url,
                    engine_kwargs={"pool_pre_ping": True},
                    heartbeat_interval=heartbeat_s,
                    grace_period=2 * heartbeat_s,
                    # Retry forever: a trial is only failed this way when its process died, never
                    # because of its parameters (those failures are told explicitly, with a reason).
                    **retry,
                )
        except Exception as exc:  # SQLAlchemy raises many types; all mean "cannot use it now"
            error = exc
            time.sleep(1.0 + attempt)
    raise DmlbenchError(f"Cannot open the study storage {redact_url(url)}: {error}") from error


def open_shared_study(
    storage: BaseStorage,
    name: str,
    sampler: optuna.samplers.BaseSampler,
    identity: Mapping[str, Any],
    setup: Callable[[optuna.Study], None],
    *,
    exclusive: bool,
    direction: Literal["minimize", "maximize"] = "maximize",
    wait_s: float = 120.0,
) -> optuna.Study:
    """Create the study (and run ``setup`` once) or load it and check it belongs to this run.

    ``exclusive``: no other process can have the study open now (the journal's first opener), so
    an unfinished setup from a killed process is simply redone instead of waited for.
    """
    identity_json = json.loads(json.dumps(identity))
    try:
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, direction=direction, load_if_exists=False
        )
    except DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        stored = study.user_attrs.get(IDENTITY_ATTR)
        if stored is not None and stored != identity_json:
            raise DmlbenchError(
                f"The study {name!r} in this storage belongs to a different run configuration "
                f"(stored identity {stored}, this run {identity_json}); refusing to mix results."
            ) from None
        if study.user_attrs.get(READY_ATTR):
            return study
        if exclusive:
            _initialise(study, identity_json, setup)
            return study
        deadline = time.monotonic() + wait_s
        while not study.user_attrs.get(READY_ATTR):
            if time.monotonic() > deadline:
                raise DmlbenchError(
                    f"The study {name!r} was created but not initialised within {wait_s:.0f}s (its "
                    "creator probably died). Delete it (optuna delete-study) and start again."
                ) from None
            time.sleep(0.5)
        return study
    _initialise(study, identity_json, setup)
    return study


def _initialise(study: optuna.Study, identity: Any, setup: Callable[[optuna.Study], None]) -> None:
    study.set_user_attr(IDENTITY_ATTR, identity)
    setup(study)
    study.set_user_attr(READY_ATTR, True)


def fail_stale(study: optuna.Study) -> None:
    """Fail trials whose process stopped sending heartbeats (and let the callback retry them).

    Optuna does this at the start of each trial inside ``study.optimize``; the runner uses
    ask/tell and calls it itself. A no-op for the journal storage.
    """
    # No isinstance check on RDBStorage here: a loaded study holds its storage wrapped in Optuna's
    # cache layer, and such a check silently disabled stale-trial recovery (a worker waited forever
    # for a dead worker's trial). Optuna's function checks for heartbeat support itself.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fail_stale_trials(study)


@contextmanager
def heartbeat(storage: BaseStorage, trial_id: int) -> Iterator[None]:
    """Record heartbeats for ``trial_id`` while the block runs (no-op without heartbeat support).

    Optuna does this itself only inside ``study.optimize``; the runner uses ask/tell.
    """
    if not isinstance(storage, RDBStorage) or not storage.get_heartbeat_interval():
        yield
        return
    rdb, interval = storage, storage.get_heartbeat_interval()
    stop = threading.Event()

    def beat() -> None:
        while True:
            # A transient database error must not kill the training.
            with contextlib.suppress(Exception):
                rdb.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, daemon=True, name=f"heartbeat-{trial_id}")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
