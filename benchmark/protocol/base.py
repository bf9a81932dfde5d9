"""What every protocol run shares: resolve, run directory, record header, write, the step sequence.

A protocol's run class (:mod:`benchmark.protocol.mlrc_run`, ``traditional_run``, ``cbir_run``)
subclasses :class:`ProtocolRun` and fills in its steps: ``load_data``, ``split``, ``execute``
(its training and evaluation stages) and ``build_record``. :meth:`ProtocolRun.run` runs them in
order: resolve -> data -> split -> run directory -> execute -> record. All state lives in the
run directory, so re-running the same command after an interruption continues where it stopped.
The leaderboard is the caller's (:func:`benchmark.api.run` refreshes it after the record is written).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch

from benchmark.analysis.provenance import check_resume_code, code_summary
from benchmark.config import (
    Deviation,
    RunConfig,
    config_to_dict,
    describe_schedule,
    deviations,
)
from benchmark.data.augment import AugmentSpec
from benchmark.engine.device import pick_device
from benchmark.engine.environment import code_identity
from benchmark.engine.train import StepCallback
from benchmark.errors import DmlbenchError
from benchmark.faults import kill_point
from benchmark.io import differing_keys, read_json, write_json_atomic
from benchmark.losses import LOSSES, LossSpec
from benchmark.models.pretrained import weights_record
from benchmark.models.trunks import WeightsLookup, lookup_cached_weights, trunk_spec
from benchmark.plugins import record_sources
from benchmark.protocol import run_lock
from benchmark.protocol.extend_search import (
    check_resumed_extension,
    extension_of,
    run_identity,
    seed_run_dir,
)
from benchmark.protocol.progress import Progress, Stopwatch
from benchmark.protocol.registry import PROTOCOLS, protocol_spec, resolve_run_config
from benchmark.protocol.request import RunRequest, check_request, dataset_paper_settings, request_layers
from benchmark.protocol.run_data import AUGMENTS
from benchmark.protocol.run_files import run_dir_name
from benchmark.protocol.space import search_space
from benchmark.records import SCHEMA, PluginsDoc, RecordHeader, RunRecordDoc
from benchmark.search.storage import is_database_url

#: The schema (and its version) of the records written: the one the reader parses.
RECORD_SCHEMA = SCHEMA


#: Timings of the invocations that worked in a run directory without finishing it.
TIMINGS_FILE = "timings.json"
#: When each owner invocation of a run directory started: one more entry than timings were saved
#: means an invocation ended without saving them (SIGKILL, power loss), and its time is not counted.
STARTS_FILE = "invocations.json"


def add_timings(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per step, the sum over invocations (rounded to ms), keys in first-seen order."""
    out: dict[str, float] = {}
    for t in parts:
        for key, value in t.items():
            if isinstance(value, int | float):
                out[key] = round(out.get(key, 0.0) + float(value), 3)
    return out


@dataclass
class RunResult:
    """A finished run: its record (also written to ``record_path``) and where its files are.

    ``leaderboard_paths`` is filled by the caller that refreshed the leaderboard
    (:func:`benchmark.api.run`); a run class returns it empty.
    """

    record_path: Path
    run_dir: Path
    leaderboard_paths: list[Path]
    record: dict[str, Any]


class ProtocolRun:
    """One (dataset, protocol, loss, budget, seed) run; subclasses are the protocols."""

    #: Whether the protocol's leaderboard has plots (refreshed by the caller with its tables).
    LEADERBOARD_PLOTS = False

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.watch = Stopwatch()
        self.progress = Progress(0, quiet=request.quiet)

    # -- step 1 ---------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Build and validate the whole configuration before any compute."""
        req = self.request
        check_request(req)
        self.loss_spec: LossSpec = LOSSES.get(req.loss)
        protocol_data, overrides, user = request_layers(req)
        self.budget_overrides = overrides
        self.config, self.paper = resolve_run_config(protocol_data, overrides, user, dataset_paper_settings)
        # The protocol's own torch-free checks, as preflight makes them (before the common ones).
        protocol_spec(self.config.protocol.name).check(self.config, req)
        cached = self._cached_trunk_weights()
        if cached is not None and cached.found is not None:
            # Recorded as if given with --trunk-weights: the run record names the file used.
            user["model.trunk_weights"] = str(cached.found)
            self.config, self.paper = resolve_run_config(
                protocol_data, overrides, user, dataset_paper_settings
            )
            self.progress.message(f"pretrained trunk weights from the {cached.cache} cache: {cached.found}")
        self._validate_names(self.config)
        self.deviations: list[Deviation] = deviations(self.config, self.paper)
        self.search_space, self.fixed_params = search_space(self.config, req.loss)
        self.augment: AugmentSpec | None = AUGMENTS[self.config.data.augment]
        self.device: torch.device = pick_device(req.device)

    def _cached_trunk_weights(self) -> WeightsLookup | None:
        """Pretrained weights asked for without a file: the trunk's public file in a local cache.

        The torch hub cache, and for ``timm:NAME`` trunks first the Hugging Face hub cache.
        """
        m = self.config.model
        if not m.pretrained or m.trunk_weights:
            return None
        return lookup_cached_weights(trunk_spec(m.trunk))

    def _validate_names(self, c: RunConfig) -> None:
        """The checks of the resolved config every protocol shares (names, counts, weights), usually
        :func:`~benchmark.protocol.request.validate_common`; the protocol's own torch-free checks
        are its declaration's ``check_config``, which :meth:`resolve` makes first."""
        raise NotImplementedError

    # -- steps 2/3: the protocol's --------------------------------------------------------------
    def load_data(self) -> None:
        """Load the dataset (and what the protocol derives from it before splitting)."""
        raise NotImplementedError

    def split(self) -> None:
        """Set the protocol's training and evaluation sets."""
        raise NotImplementedError

    # -- step 4 ---------------------------------------------------------------------------------
    def prepare_run_dir(self) -> None:
        """Create the run directory, or check that an existing one belongs to this configuration."""
        req, c = self.request, self.config
        identity = run_identity(req.protocol, req.loss, req.budget, req.seed, config_to_dict(c))
        self.run_dir = req.out / c.data.dataset / req.protocol / run_dir_name(identity)
        if req.worker_id is None and not is_database_url(req.storage):
            # One owner at a time (--workers processes work under their parent's lock; with a
            # database the study's heartbeats arbitrate): a second process stops here, at once.
            self._lock = run_lock.acquire(self.run_dir)
        ident_path = self.run_dir / "run.json"
        code = code_identity()
        if ident_path.exists():
            existing = read_json(ident_path)
            if existing != identity:
                differ = differing_keys(existing, identity)
                raise DmlbenchError(
                    f"Run directory {self.run_dir} belongs to a different configuration (differs in: "
                    f"{', '.join(differ[:8])}); refusing to mix results. Use another --out or remove the "
                    "directory."
                )
            self.resumed = True
            check_resumed_extension(self.run_dir, req.extend_search)
        else:
            self.resumed = False
        # Seeded before run.json: a run stopped between the two seeds its directory again.
        source = None if self.resumed else req.extend_search
        self.search_extended_from: dict[str, Any] | None = (
            extension_of(self.run_dir)
            if source is None
            else seed_run_dir(self.run_dir, source, identity, code, req.resume_mixed_code)
        )
        # Before run.json, so that a run directory with an identity always has a code history.
        self.code_history = check_resume_code(
            self.run_dir, code, self.resumed or source is not None, req.resume_mixed_code
        )
        if not self.resumed:
            write_json_atomic(ident_path, identity)
        # A record in the run directory is written last: the run finished in an earlier invocation.
        # Reused as it is when this code wrote it; other code (--resume-mixed-code) rewrites it, so
        # that the record names its writer (docs/protocols.md §6).
        self.finished_before = self.resumed and self._written_by_this_code(self.run_dir / "record.json")
        if self.__dict__.get("_lock") is not None and not self.finished_before:
            self._stamp_start()
        self.progress.message(f"run directory: {self.run_dir}" + (" (resuming)" if self.resumed else ""))
        if source is not None and self.search_extended_from is not None:
            n = self.search_extended_from["n_trials"]
            self.progress.message(
                f"search: starts from the {n} trial{'' if n == 1 else 's'} of {source} "
                "(--extend-search); only the extra trials are trained"
            )
            if source.is_file() and source.resolve() == self.results_record_path().resolve():
                # Extending a record in place is the usual way to lengthen a board's search; say
                # so, since its earlier test results are then kept only by git.
                self.progress.message(
                    f"search: this run's record will replace its source {source} when it ends "
                    "(the source's sha256 and timings stay in execution.search_extended_from)"
                )

    # -- step 5: the protocol's -----------------------------------------------------------------
    def execute(self) -> None:
        """The protocol's training and evaluation stages (finished work is reused)."""
        raise NotImplementedError

    # -- step 6 ---------------------------------------------------------------------------------
    def record_header(self) -> RecordHeader:
        """The fields every protocol's record starts with: schema, identity, config, deviations."""
        c, req = self.config, self.request
        return {
            "schema": RECORD_SCHEMA,
            # The protocol kind (a record kind: PROTOCOLS): which layout a reader checks the record against.
            "kind": c.protocol.name,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "protocol": req.protocol,
            "dataset": c.data.dataset,
            "loss": self.loss_spec.name,
            "loss_display_name": self.loss_spec.display_name,
            "embedding_space": self.loss_spec.embedding_space,
            "budget": req.budget,
            "seed": req.seed,
            "run_dir": str(self.run_dir),
            "config": config_to_dict(c),
            "deviations": [{"key": d.key, "paper": d.paper, "value": d.value} for d in self.deviations],
            # The trunk's weights file, its sha256 and (built-in weights) how it was made; None: random init.
            "trunk_weights": weights_record(c.model.trunk, c.model.pretrained, c.model.trunk_weights),
            # The dataset's own paper settings (docs/protocols.md §2.2 schedule, ...) and the schedule used.
            "dataset_paper_settings": dict(dataset_paper_settings(c.data.dataset, c.protocol.name)),
            "schedule": self.schedule_info(),
            "loss_dataset_defaults": self.loss_spec.defaults_for(c.data.dataset),
            **self._plugin_sources(),
        }

    def schedule_info(self) -> dict[str, Any]:
        """The convergence schedule used and where its values came from (paper, budget, user)."""
        declared = dataset_paper_settings(self.config.data.dataset, self.config.protocol.name)
        return describe_schedule(
            self.config,
            self.paper,
            self.request.budget,
            self.budget_overrides,
            any(k in declared for k in ("train.eval_every", "train.patience")),
        )

    def _plugin_sources(self) -> PluginsDoc:
        """``plugins``: where the run's outside components came from (absent when all are built in)."""
        c = self.config
        used = {"loss": self.loss_spec.name, "dataset": c.data.dataset, "trunk": c.model.trunk}
        sources = record_sources(used)
        # A plugin protocol's declaration (its entry point's module), after the components.
        protocol = PROTOCOLS.source_of(c.protocol.name)
        if protocol is not None:
            sources.append(replace(protocol, kind="protocol").to_dict())
        return {"plugins": sources} if sources else {}

    def build_record(self) -> RunRecordDoc:
        """The run record: :meth:`record_header` and the protocol's results (one schema with the
        reader, :mod:`benchmark.records`)."""
        raise NotImplementedError

    def results_record_path(self) -> Path:
        """Where the record goes under ``results_dir``: one file per loss, budget and seed, so a
        later run of them replaces it."""
        req = self.request
        name = f"{self.loss_spec.name}.{req.budget}.seed{req.seed}.json"
        return req.results_dir / self.config.data.dataset / req.protocol / "records" / name

    def write_record(self) -> None:
        """Write the record into the run directory, then under ``results_dir`` (the leaderboard's input).

        ``timings_s`` adds up every invocation that worked in the run directory (the earlier ones
        from ``timings.json``), so a resumed run's record counts its whole wall time. A run
        directory whose record is already written is finished: a re-run reuses its record as it
        is (byte-identical), after writing it back under ``results_dir`` if it went missing there.
        """
        self.record_path = self.results_record_path()
        finished = self.run_dir / "record.json"
        if self.finished_before:
            self.record = read_json(finished)
            self.record_written = True
            if not self.record_path.exists() or read_json(self.record_path) != self.record:
                write_json_atomic(self.record_path, self.record)
            return
        # The typed document is the JSON object written (a TypedDict is a dict at run time).
        self.record = cast(dict[str, Any], self.build_record())
        earlier = self.earlier_timings()
        self.record["timings_s"] = add_timings([*earlier, dict(self.watch.timings)])
        execution = self.record.setdefault("execution", {})
        execution["invocations"] = len(earlier) + 1
        started = len(self._starts())
        if started >= len(earlier) + 1:  # else the run directory predates the stamps: unknown
            execution["invocations_without_timings"] = started - (len(earlier) + 1)
        # Which code trained its folds (from the folds themselves: every protocol's, plugins' too)
        # and which wrote it.
        self.record["code"] = code_summary(self.record, code_identity(), self.code_history)
        write_json_atomic(finished, self.record)
        self.record_written = True
        kill_point("record.run_dir")
        write_json_atomic(self.record_path, self.record)

    @staticmethod
    def _written_by_this_code(path: Path) -> bool:
        if not path.exists():
            return False
        record = read_json(path)
        code = record.get("code") if isinstance(record, dict) else None
        return isinstance(code, dict) and code.get("writer") == code_identity()

    def earlier_timings(self) -> list[dict[str, float]]:
        """The timings of earlier invocations in this run directory (``timings.json``)."""
        path = self.run_dir / TIMINGS_FILE
        data = read_json(path) if path.exists() else []
        return [dict(t) for t in data] if isinstance(data, list) else []

    def _starts(self) -> list[str]:
        path = self.run_dir / STARTS_FILE
        data = read_json(path) if path.exists() else []
        return [str(t) for t in data] if isinstance(data, list) else []

    def _stamp_start(self) -> None:
        """Add this invocation's start to ``invocations.json`` (the owner's, before any work)."""
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        write_json_atomic(self.run_dir / STARTS_FILE, [*self._starts(), now])
        self._stamped = True

    def save_unfinished_timings(self) -> None:
        """Append this invocation's timings to ``timings.json`` when it ends without a record (an
        error or an interrupt; a SIGKILLed process cannot, and its time is not counted). Only the
        run directory's owner does (not a process refused as a second owner, not a worker)."""
        if self.__dict__.get("_lock") is None or getattr(self, "record_written", False):
            return
        if getattr(self, "finished_before", False):
            return  # the run had finished: its record stays as it is
        if not getattr(self, "_stamped", False):
            return  # stopped before its start stamp (a refused resume): no work, no invocation
        # The error being raised matters more than this invocation's timings.
        with contextlib.suppress(OSError, DmlbenchError):
            write_json_atomic(
                self.run_dir / TIMINGS_FILE, [*self.earlier_timings(), dict(self.watch.timings)]
            )

    def step_status(self, where: str) -> StepCallback:
        """A per-step callback showing ``where`` and the step as a heartbeat (slow epochs only)."""
        max_epochs = self.config.train.max_epochs

        def cb(epoch: int, step: int, steps: int) -> None:
            self.progress.heartbeat(f"{where} epoch {epoch}/{max_epochs} step {step}/{steps}")

        return cb

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Execute every step in order (already finished work is reused); returns the record."""
        t0 = time.perf_counter()
        self.resolve()
        with self.watch.time("data"):
            self.load_data()
            self.split()
        try:
            self.prepare_run_dir()
            for d in self.deviations:
                self.progress.message(f"deviation from paper: {d.describe()}")
            self.execute()
            self.watch.timings["total"] = round(time.perf_counter() - t0, 3)
            self.write_record()
        except BaseException:
            self.watch.timings["total"] = round(time.perf_counter() - t0, 3)
            self.save_unfinished_timings()
            raise
        finally:
            self.release_run_dir()
        return RunResult(self.record_path, self.run_dir, [], self.record)

    def release_run_dir(self) -> None:
        """Give up this run's ownership of its run directory (see :mod:`benchmark.protocol.run_lock`)."""
        lock = self.__dict__.pop("_lock", None)
        if lock is not None:
            run_lock.release(lock)
