"""The run record's schema: typed, validated at load, with a kind and a version.

A run writes one JSON record (``results/<dataset>/<protocol>/records/*.json``); every reader of
records (leaderboards, plots, significance tables, published-value joins, the Python API) goes
through :func:`parse_record` / :func:`load_records`, which check the fields those readers use and
turn them into the frozen dataclasses below. A record that breaks the schema is a
:class:`RecordError` naming the file, the key (as a dotted path) and the expected type; fields no
reader uses (``environment`` beyond git, ``execution``, ``rep_details`` ...) stay in
:attr:`RunRecord.document` untouched.

Schema
------
``schema`` is ``"dmlbench.run/<version>"``; this module reads version :data:`SCHEMA_VERSION` (1)
and refuses a newer one with an error asking for a newer dmlbench. A document without
``schema`` is read as version 1.

``kind`` is the protocol kind that produced the record (the protocol file's ``[protocol] name``:
``mlrc``, ``traditional``, ``cbir`` or a plugin protocol's; an unknown kind is an error naming
the known ones). The record kinds (:data:`RECORD_KINDS`) are registered by the protocols that
write them: :func:`benchmark.protocol.registry.register_protocol` registers its kind, a plugin
protocol's entry point (``dmlbench.protocols``) is found here on first use, so ``report`` and
``compare`` read a plugin protocol's records, and the built-in kinds are placeholders to their
declarations; each declaration fixes the evaluation modes its records may leave out
(``ProtocolSpec.record_modes``): an ``mlrc`` record's modes are
``separated``/``concatenated`` unless ``test.modes`` names others;
``traditional`` and ``cbir`` records must name theirs in ``test.modes`` (with
``test.mode_labels``). Runs write ``kind`` explicitly; adding an optional field keeps the
version at 1, so every record written before (all committed ones under ``results/``) is the same
version.

Migration rule for a record without ``kind`` (in memory; files are never rewritten): the kind is
``config.protocol.name`` (what the runner was chosen by); without it, the top-level ``protocol``
when that names a known kind; else ``mlrc`` (the kind of a protocol file without a name,
:func:`benchmark.config.protocol_kind`). :attr:`RunRecord.migrated` says what was derived.

Lenient on purpose: the fields readers can do without are optional with a stated default
(``budget`` "unknown", ``loss_display_name`` = ``loss``, ``seed`` None, ``created`` "", empty
summaries), so hand-made and partial records (tests, older runs) still render.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn, TypedDict

from benchmark.config import Deviation
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.moved_keys import current_layout
from benchmark.registry import PluginSource, PluginSourceDoc, Registry

SCHEMA_PREFIX = "dmlbench.run/"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_PREFIX}{SCHEMA_VERSION}"

#: MLRC's evaluation modes with their short column labels (docs/protocols.md §6).
MLRC_MODES: tuple[tuple[str, str], ...] = (("separated", "Sep."), ("concatenated", "Concat."))


@dataclass(frozen=True)
class RecordKind:
    """A kind of run record: the protocol kind that writes it, and the modes its records may omit."""

    name: str
    #: The (mode, label) column groups of a record that names none (None: it must name its modes).
    default_modes: tuple[tuple[str, str], ...] | None = None


def _adopt_kind(obj: object, shown: str) -> RecordKind:
    # A protocol plugin's entry point names its ProtocolSpec, read here by its name and record modes
    # (this layer reads records and imports no protocol code).
    if isinstance(obj, RecordKind):
        return obj
    name, modes = getattr(obj, "name", None), getattr(obj, "record_modes", None)
    if not isinstance(name, str) or not (modes is None or isinstance(modes, tuple)):
        raise ConfigError(f"Protocol plugin {shown} must name a ProtocolSpec, got {obj!r}.")
    return RecordKind(name, modes)


#: The record kinds, the kinds of the protocols that write records (see the module docstring).
RECORD_KINDS: Registry[RecordKind] = Registry("record kind", group="dmlbench.protocols", adopt=_adopt_kind)
for _builtin in ("mlrc", "traditional", "cbir"):  # the built-in protocols: their declarations register them
    RECORD_KINDS.register_lazy(_builtin, f"benchmark.protocol.{_builtin}:PROTOCOL")


def register_record_kind(kind: RecordKind) -> RecordKind:
    """Make ``kind`` a record kind that readers accept (a protocol's registration calls this)."""
    return RECORD_KINDS.register(kind.name, kind)


class RecordError(DmlbenchError):
    """A record that does not follow the schema: names the file, the key and what was expected."""


# -- the typed record -------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A summary over repetitions: mean and 95% half-width (None: no value / no interval)."""

    mean: float | None
    half_width: float | None


@dataclass(frozen=True)
class TestResults:
    """``test``: repetitions, metric names, evaluation modes, per-rep values and summaries."""

    reps: int
    metrics: tuple[str, ...]
    #: (mode, label) column groups: the record's ``test.modes`` or its kind's default modes.
    modes: tuple[tuple[str, str], ...]
    #: Whether the record named its modes itself (``test.modes``).
    named_modes: bool
    summary: Mapping[str, Mapping[str, Interval]]
    per_rep: Mapping[str, Mapping[str, tuple[float, ...]]]
    #: Further per-rep summaries (e.g. cbir's query times), by name.
    extra_summary: Mapping[str, Interval]

    def has_mode(self, mode: str) -> bool:
        """Whether this record evaluates ``mode``."""
        return any(m == mode for m, _ in self.modes)


@dataclass(frozen=True)
class Fold:
    """One fold training of a search trial: its validation curve (epoch, value) and best epoch."""

    curve: tuple[tuple[float, float], ...]
    best_epoch: int | None


@dataclass(frozen=True)
class Trial:
    """One search trial (``search.trials[i]``)."""

    number: int | None
    state: str
    value: float | None
    origin: str | None
    fold_sem: float | None
    params: Mapping[str, float]
    folds: tuple[Fold, ...]


@dataclass(frozen=True)
class ParamRange:
    """A searched hyperparameter's range (``search.space[name]``)."""

    low: float
    high: float
    log: bool


@dataclass(frozen=True)
class Search:
    """``search``: the hyperparameter search of an MLRC run."""

    n_trials: int
    best_trial: int | None
    space: Mapping[str, ParamRange]
    trials: tuple[Trial, ...]

    @property
    def complete(self) -> int:
        """How many trials completed."""
        return sum(1 for t in self.trials if t.state == "COMPLETE")


@dataclass(frozen=True)
class RunRecord:
    """A validated run record (schema :data:`SCHEMA`; a missing ``kind`` derived)."""

    source: str
    version: int
    kind: str
    protocol: str
    dataset: str
    loss: str
    loss_display_name: str
    budget: str
    seed: int | None
    created: str
    git_commit: str
    dirty: bool
    embedding_dim: int | None
    n_folds: int | None
    test: TestResults
    untrained: Mapping[str, Mapping[str, float | None]]
    deviations: tuple[Deviation, ...]
    notes: tuple[str, ...]
    plugins: tuple[PluginSource, ...]
    search: Search | None
    timings_s: Mapping[str, float | None]
    #: What the migration derived (empty for a record with every field of the current schema).
    migrated: tuple[str, ...] = ()
    #: The whole JSON document, for fields outside this schema.
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def commit(self) -> str:
        """The short git commit, ``+dirty`` when the tree had local changes, ``+mixed`` when more
        than one code version trained its folds or wrote it (see :attr:`code_versions`)."""
        return self.git_commit[:10] + ("+dirty" if self.dirty else "") + ("+mixed" if self.mixed_code else "")

    @cached_property
    def code_versions(self) -> Mapping[str, int]:
        """Fold trainings (search and test) per code version behind the record, the one that wrote
        it included (:func:`benchmark.analysis.provenance.code_versions`; ``unrecorded`` for fold
        results written before they carried their code)."""
        from benchmark.analysis.provenance import code_versions

        return code_versions(self.document)

    @property
    def mixed_code(self) -> bool:
        """Whether more than one code version is behind the record (a run resumed across a code
        change, or search workers with different checkouts)."""
        return len(self.code_versions) > 1

    @cached_property
    def convergence(self) -> Mapping[str, Any]:
        """:func:`benchmark.analysis.convergence.convergence_summary` of the record (computed once)."""
        from benchmark.analysis.convergence import convergence_summary

        return convergence_summary(self.document)

    def training_wall_s(self) -> float | None:
        """``timings_s["search"] + timings_s["test"]``, None when either is missing."""
        search, test = self.timings_s.get("search"), self.timings_s.get("test")
        return None if search is None or test is None else search + test


# -- the written document ---------------------------------------------------------------------
# What a run writes, typed (schema SCHEMA): the protocols' record writers build these
# (benchmark.protocol.base.ProtocolRun.record_header, mlrc_run and repeated build_record), and
# parse_record reads the same keys into the dataclasses above. TypedDicts are plain dicts at run
# time, so the JSON is what the writers always wrote (key order included). Every key a run writes
# is declared (required: written by every protocol; optional: by some); parse_record stays lenient
# where the module docstring says so (records written before a key existed), and sections no reader
# parses stay dict[str, Any]. A new optional key keeps SCHEMA_VERSION; renaming or removing one is
# a new version.


class IntervalDoc(TypedDict):
    """A summary over repetitions (:func:`benchmark.engine.evaluation.interval_dict`): read as
    :class:`Interval` (``mean``, ``half_width``)."""

    mean: float
    half_width: float
    n: int
    low: float
    high: float


class DeviationDoc(TypedDict):
    """A :class:`benchmark.config.Deviation` as the record holds it (an entry of ``deviations``)."""

    key: str
    paper: Any
    value: Any


class ParamRangeDoc(TypedDict):
    """``search.space[name]``, read as :class:`ParamRange`."""

    low: float
    high: float
    log: bool


class SearchDoc(TypedDict):
    """``search`` of an MLRC record, read as :class:`Search` (``trials``: the search stage's)."""

    sampler: str
    n_trials: int
    space: dict[str, ParamRangeDoc]
    fixed: dict[str, float]
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, float]
    trials: list[dict[str, Any]]


class _RecordTestDoc(TypedDict):
    reps: int
    metrics: list[str]
    per_rep: dict[str, dict[str, list[float]]]
    summary: dict[str, dict[str, IntervalDoc]]
    rep_details: list[dict[str, Any]]


class RecordTestDoc(_RecordTestDoc, total=False):
    """``test``, read as :class:`TestResults`: ``modes`` (with ``mode_labels``) where the record
    kind has no default modes, ``extra_*`` for further per-rep quantities."""

    modes: list[str]
    mode_labels: dict[str, str]
    extra_per_rep: dict[str, list[float]]
    extra_summary: dict[str, IntervalDoc]


class PluginsDoc(TypedDict, total=False):
    """``plugins``: present only when a component of the run is a plugin."""

    plugins: list[PluginSourceDoc]


class RecordHeader(PluginsDoc):
    """What every protocol's record starts with (``ProtocolRun.record_header``)."""

    schema: str
    kind: str
    created: str
    protocol: str
    dataset: str
    loss: str
    loss_display_name: str
    embedding_space: str
    budget: str
    seed: int
    run_dir: str
    config: dict[str, Any]
    deviations: list[DeviationDoc]
    trunk_weights: dict[str, Any] | None
    dataset_paper_settings: dict[str, Any]
    schedule: dict[str, Any]
    loss_dataset_defaults: dict[str, float]


class RecordExtras(TypedDict, total=False):
    """Top-level entries of one protocol's records (``RepeatedRun.record_extras``; cbir's ``two_stage``)."""

    two_stage: bool


class _RunRecordDoc(RecordHeader):
    data: dict[str, Any]
    environment: dict[str, Any]
    test: RecordTestDoc
    untrained: dict[str, dict[str, float]]
    timings_s: dict[str, float]
    execution: dict[str, Any]


class RunRecordDoc(_RunRecordDoc, RecordExtras, total=False):
    """A whole run record as written, version :data:`SCHEMA_VERSION`: the header, the protocol's
    results, then what is added from them (``convergence``) and when it is written (``code``).
    ``search``: MLRC; ``selection_on_test``, ``notes``, ``training``: the search-free protocols."""

    search: SearchDoc
    selection_on_test: bool
    notes: list[str]
    training: dict[str, Any]
    convergence: dict[str, Any]
    code: dict[str, Any]


# -- validation -------------------------------------------------------------------------------


def _describe(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value!r}"
    return names.get(type(value), type(value).__name__)


class _Check:
    """Typed reads of a JSON document with errors that name the file and the dotted key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, expected: str, value: object) -> NoReturn:
        raise RecordError(
            f"Run record {self.source}: key {key!r} must be {expected}, found {_describe(value)}. "
            "Fix or move the file (records are written by `dmlbench run`; see benchmark/records.py)."
        )

    def missing(self, key: str, expected: str) -> NoReturn:
        raise RecordError(
            f"Run record {self.source}: required key {key!r} ({expected}) is missing. "
            "Fix or move the file (records are written by `dmlbench run`; see benchmark/records.py)."
        )

    def obj(self, value: object, key: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(key, "an object", value)
        return value

    def get(self, data: Mapping[str, Any], name: str, key: str, *, required: bool, expected: str) -> Any:
        if name not in data:
            if required:
                self.missing(f"{key}{name}", expected)
            return None
        return data[name]

    def opt_obj(self, data: Mapping[str, Any], name: str, key: str) -> Mapping[str, Any]:
        value = data.get(name)
        return {} if value is None else self.obj(value, key + name)

    def string(self, data: Mapping[str, Any], name: str, key: str, default: str | None = None) -> str:
        value = self.get(data, name, key, required=default is None, expected="a string")
        if value is None and default is not None:
            return default
        if not isinstance(value, str):
            self.fail(key + name, "a string", value)
        return value

    def opt_string(self, data: Mapping[str, Any], name: str, key: str) -> str | None:
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            self.fail(key + name, "a string or null", value)
        return value

    def integer(self, value: object, key: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(key, "an integer", value)
        return value

    def opt_int(self, data: Mapping[str, Any], name: str, key: str) -> int | None:
        value = data.get(name)
        return None if value is None else self.integer(value, key + name)

    def number(self, value: object, key: str) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            self.fail(key, "a number", value)
        return float(value)

    def opt_number(self, value: object, key: str) -> float | None:
        return None if value is None else self.number(value, key)

    def seq(self, value: object, key: str) -> Sequence[Any]:
        if not isinstance(value, list):
            self.fail(key, "a list", value)
        return value

    def strings(self, value: object, key: str) -> tuple[str, ...]:
        items = self.seq(value, key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                self.fail(f"{key}[{i}]", "a string", item)
        return tuple(items)


def schema_version(data: Mapping[str, Any], source: str) -> int:
    """The schema version of a record document (1 without ``schema``); errors for others."""
    schema = data.get("schema")
    if schema is None:
        return 1
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise RecordError(
            f"Run record {source}: key 'schema' is {schema!r}, not {SCHEMA_PREFIX}<version>; "
            "this file is not a dmlbench run record."
        )
    text = schema[len(SCHEMA_PREFIX) :]
    if not text.isdigit() or int(text) < 1:
        raise RecordError(f"Run record {source}: key 'schema' has no valid version: {schema!r}.")
    version = int(text)
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"Run record {source} has schema {schema!r}, newer than this dmlbench reads "
            f"(up to {SCHEMA}); upgrade dmlbench to read it."
        )
    return version


def _kind(data: Mapping[str, Any], check: _Check) -> tuple[str, tuple[str, ...]]:
    """The record's kind and what the migration derived (see the module docstring)."""
    how: tuple[str, ...] = ()
    if "kind" in data:
        kind = check.string(data, "kind", "")
    else:
        config = data.get("config")
        section = config.get("protocol") if isinstance(config, Mapping) else None
        name = section.get("name") if isinstance(section, Mapping) else None
        top = data.get("protocol")
        if isinstance(name, str):
            kind, origin = name, "config.protocol.name"
        elif isinstance(top, str) and top in RECORD_KINDS:
            kind, origin = top, "protocol"
        else:
            kind, origin = "mlrc", "the default protocol kind"
        how = (f"no 'kind': {kind!r} from {origin}",)
    if kind not in RECORD_KINDS:  # a plugin protocol's kind: its entry point is loaded here
        raise RecordError(
            f"Run record {check.source}: unknown kind {kind!r} (key 'kind' or config.protocol.name); "
            f"known kinds: {', '.join(sorted(RECORD_KINDS.names()))}."
        )
    return kind, how


def _interval(check: _Check, value: object, key: str) -> Interval:
    cell = check.obj(value, key)
    if "mean" not in cell:
        check.missing(f"{key}.mean", "a number or null")
    return Interval(
        check.opt_number(cell["mean"], key + ".mean"),
        check.opt_number(cell.get("half_width"), key + ".half_width"),
    )


def _test(check: _Check, data: Mapping[str, Any], kind: str) -> TestResults:
    test = check.obj(check.get(data, "test", "", required=True, expected="an object"), "test")
    reps = check.integer(check.get(test, "reps", "test.", required=True, expected="an integer"), "test.reps")
    metrics = check.strings(
        check.get(test, "metrics", "test.", required=True, expected="a list of metric names"), "test.metrics"
    )
    default = RECORD_KINDS.get(kind).default_modes
    if "modes" in test:
        labels = check.opt_obj(test, "mode_labels", "test.")
        modes = tuple((m, str(labels.get(m, m))) for m in check.strings(test["modes"], "test.modes"))
    elif default is None:
        check.missing("test.modes", f"a list of mode names; a {kind} record names its evaluation modes")
    else:
        modes = default
    summary = {
        mode: {
            m: _interval(check, cell, f"test.summary.{mode}.{m}")
            for m, cell in check.obj(cells, f"test.summary.{mode}").items()
        }
        for mode, cells in check.opt_obj(test, "summary", "test.").items()
    }
    per_rep: dict[str, dict[str, tuple[float, ...]]] = {}
    for mode, values in check.opt_obj(test, "per_rep", "test.").items():
        per_rep[mode] = {}
        for m, reps_values in check.obj(values, f"test.per_rep.{mode}").items():
            key = f"test.per_rep.{mode}.{m}"
            per_rep[mode][m] = tuple(
                check.number(v, f"{key}[{i}]") for i, v in enumerate(check.seq(reps_values, key))
            )
    extra = {
        name: _interval(check, cell, f"test.extra_summary.{name}")
        for name, cell in check.opt_obj(test, "extra_summary", "test.").items()
    }
    config = data.get("config")
    test_config = config.get("test") if isinstance(config, Mapping) else None
    level = test_config.get("confidence", 0.95) if isinstance(test_config, Mapping) else 0.95
    confidence = float(level) if isinstance(level, int | float) and 0 < level < 1 else 0.95
    _check_values(check, reps, summary, per_rep, extra, confidence)
    return TestResults(reps, metrics, modes, "modes" in test, summary, per_rep, extra)


#: How far a stored summary may be from the one its per-rep values give (float round-off only).
SUMMARY_RTOL = 1e-6


def _check_values(
    check: _Check,
    reps: int,
    summary: Mapping[str, Mapping[str, Interval]],
    per_rep: Mapping[str, Mapping[str, tuple[float, ...]]],
    extra: Mapping[str, Interval],
    confidence: float,
) -> None:
    """Values, not just shapes: finite numbers, as many per-rep values as ``test.reps``, and
    summaries that are the t-intervals of their per-rep values. A record failing these would be
    rendered (a 1e999 mean shown bold as the best), so it is refused, naming the key."""
    cells = [(f"test.summary.{mode}.{m}", c) for mode, cs in summary.items() for m, c in cs.items()]
    cells += [(f"test.extra_summary.{name}", c) for name, c in extra.items()]
    for key, cell in cells:
        if cell.mean is not None and not math.isfinite(cell.mean):
            check.fail(f"{key}.mean", "a finite number or null", cell.mean)
        if cell.half_width is not None and not (math.isfinite(cell.half_width) and cell.half_width >= 0):
            check.fail(f"{key}.half_width", "a finite number >= 0 or null", cell.half_width)
    for mode, values in per_rep.items():
        for m, reps_values in values.items():
            key = f"test.per_rep.{mode}.{m}"
            for i, v in enumerate(reps_values):
                if not math.isfinite(v):
                    check.fail(f"{key}[{i}]", "a finite number", v)
            if len(reps_values) != reps:
                check.fail(key, f"a list of test.reps = {reps} values", list(reps_values))
            stored = summary.get(mode, {}).get(m)
            if stored is None or stored.mean is None or not reps_values:
                continue
            from benchmark.stats.intervals import t_interval

            ref = t_interval(reps_values, confidence)
            if not math.isclose(stored.mean, ref.mean, rel_tol=SUMMARY_RTOL, abs_tol=1e-12):
                check.fail(f"test.summary.{mode}.{m}.mean", f"the mean of {key} ({ref.mean!r})", stored.mean)
            hw = stored.half_width
            known = hw is not None and math.isfinite(ref.half_width)
            if (
                hw is not None
                and known
                and not math.isclose(hw, ref.half_width, rel_tol=SUMMARY_RTOL, abs_tol=1e-12)
            ):
                check.fail(
                    f"test.summary.{mode}.{m}.half_width",
                    f"the {confidence:.0%} t half-width of {key} ({ref.half_width!r})",
                    hw,
                )


def _search(check: _Check, data: Mapping[str, Any]) -> Search | None:
    if data.get("search") is None:
        return None
    search = check.obj(data["search"], "search")
    n_trials = check.integer(
        check.get(search, "n_trials", "search.", required=True, expected="an integer"), "search.n_trials"
    )
    space = {}
    for name, rng in check.opt_obj(search, "space", "search.").items():
        key = f"search.space.{name}"
        r = check.obj(rng, key)
        low = check.number(check.get(r, "low", key + ".", required=True, expected="a number"), key + ".low")
        high = check.number(
            check.get(r, "high", key + ".", required=True, expected="a number"), key + ".high"
        )
        space[name] = ParamRange(low, high, bool(r.get("log", False)))
    trials = []
    for i, raw in enumerate(check.seq(search.get("trials", []), "search.trials")):
        key = f"search.trials[{i}]"
        t = check.obj(raw, key)
        folds = []
        for k, fraw in enumerate(check.seq(t.get("folds") or [], key + ".folds")):
            fkey = f"{key}.folds[{k}]"
            f = check.obj(fraw, fkey)
            curve = []
            for j, point in enumerate(check.seq(f.get("curve") or [], fkey + ".curve")):
                pkey = f"{fkey}.curve[{j}]"
                pair = check.seq(point, pkey)
                if len(pair) != 2:
                    check.fail(pkey, "an [epoch, value] pair", pair)
                curve.append((check.number(pair[0], pkey), check.number(pair[1], pkey)))
            folds.append(Fold(tuple(curve), check.opt_int(f, "best_epoch", fkey + ".")))
        params = {
            p: check.number(v, f"{key}.params.{p}") for p, v in check.opt_obj(t, "params", key + ".").items()
        }
        trials.append(
            Trial(
                check.opt_int(t, "number", key + "."),
                check.string(t, "state", key + "."),
                check.opt_number(t.get("value"), key + ".value"),
                check.opt_string(t, "origin", key + "."),
                check.opt_number(t.get("fold_sem"), key + ".fold_sem"),
                params,
                tuple(folds),
            )
        )
    return Search(n_trials, check.opt_int(search, "best_trial", "search."), space, tuple(trials))


def parse_plugins(data: Mapping[str, Any], source: str = "<record>") -> tuple[PluginSource, ...]:
    """``plugins`` of a record document: where its outside components came from (may be absent)."""
    check = _Check(source)
    plugins = []
    for i, raw in enumerate(check.seq(data.get("plugins", []), "plugins")):
        key = f"plugins[{i}]."
        p = check.obj(raw, key[:-1])
        plugins.append(
            # The type the run wrote (benchmark.registry.PluginSource.to_dict): one schema.
            PluginSource(
                kind=check.string(p, "kind", key),
                name=check.string(p, "name", key),
                ref=check.string(p, "ref", key),
                module=check.string(p, "module", key),
                file=check.opt_string(p, "file", key),
                sha256=check.opt_string(p, "sha256", key),
                distribution=check.opt_string(p, "distribution", key),
                version=check.opt_string(p, "version", key),
            )
        )
    return tuple(plugins)


def parse_record(data: object, source: str = "<record>") -> RunRecord:
    """Validate a record document (parsed JSON) and return it typed (a missing ``kind`` derived).

    ``source`` (the file) is named in every :class:`RecordError`.
    """
    check = _Check(source)
    if not isinstance(data, Mapping):
        raise RecordError(f"Run record {source}: not a JSON object (found {_describe(data)}).")
    version = schema_version(data, source)
    kind, migrated = _kind(data, check)
    loss = check.string(data, "loss", "")
    config = check.opt_obj(data, "config", "")
    model = check.opt_obj(config, "model", "config.")
    protocol_section = check.opt_obj(config, "protocol", "config.")
    git = check.opt_obj(check.opt_obj(data, "environment", ""), "git", "environment.")
    untrained = {
        mode: {
            m: check.opt_number(v, f"untrained.{mode}.{m}")
            for m, v in check.obj(cells, f"untrained.{mode}").items()
        }
        for mode, cells in check.opt_obj(data, "untrained", "").items()
    }
    deviations = []
    for i, raw in enumerate(check.seq(data.get("deviations", []), "deviations")):
        d = check.obj(raw, f"deviations[{i}]")
        deviations.append(
            # The type the run derived and wrote (benchmark.config.deviations): one schema.
            Deviation(check.string(d, "key", f"deviations[{i}]."), d.get("paper"), d.get("value"))
        )
    seed = data.get("seed")
    return RunRecord(
        source=source,
        version=version,
        kind=kind,
        protocol=check.string(data, "protocol", "", default=""),
        dataset=check.string(data, "dataset", "", default=""),
        loss=loss,
        loss_display_name=check.string(data, "loss_display_name", "", default=loss),
        budget=check.string(data, "budget", "", default="unknown"),
        seed=None if seed is None else check.integer(seed, "seed"),
        created=check.string(data, "created", "", default=""),
        git_commit=str(git.get("commit", "unknown")),
        dirty=bool(git.get("dirty")),
        embedding_dim=model.get("embedding_dim") if isinstance(model.get("embedding_dim"), int) else None,
        n_folds=protocol_section.get("n_folds") if isinstance(protocol_section.get("n_folds"), int) else None,
        test=_test(check, data, kind),
        untrained=untrained,
        deviations=tuple(deviations),
        notes=check.strings(data.get("notes", []), "notes"),
        plugins=parse_plugins(data, source),
        search=_search(check, data),
        timings_s={
            k: check.opt_number(v, f"timings_s.{k}") for k, v in check.opt_obj(data, "timings_s", "").items()
        },
        migrated=migrated,
        document=data,
    )


def as_record(record: RunRecord | Mapping[str, Any]) -> RunRecord:
    """``record`` typed: a :class:`RunRecord` as is, a plain document parsed (for scripts and tests)."""
    return record if isinstance(record, RunRecord) else parse_record(record)


def latest_per_loss(records: Sequence[RunRecord | Mapping[str, Any]]) -> list[RunRecord]:
    """The newest record of each loss (by ``created``; of equal ones the later given), by loss name.

    The one rule every reader uses to choose a budget's records (leaderboard rows, footers, plots,
    significance tests, the published-value join).
    """
    latest: dict[str, RunRecord] = {}
    for r in sorted(map(as_record, records), key=lambda r: (r.created, r.loss)):
        latest[r.loss] = r
    return sorted(latest.values(), key=lambda r: r.loss)


def replicate_key(record: RunRecord | Mapping[str, Any]) -> str:
    """What makes records replicates of one row (docs/protocols.md §4.5): the loss and the resolved
    configuration, without where the data lay (``data.data_dir`` differs between machines) and
    without the seed (which is not part of ``config``). A config of the layout before the built-in
    protocols' own keys moved into ``settings`` is compared in today's (moved_keys.current_layout)."""
    r = as_record(record)
    config = json.loads(json.dumps(current_layout(r.document.get("config", {})), sort_keys=True, default=str))
    if isinstance(config.get("data"), dict):
        config["data"].pop("data_dir", None)
    canonical = json.dumps({"loss": r.loss, "config": config}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def replicates_per_loss(records: Sequence[RunRecord | Mapping[str, Any]]) -> dict[str, list[RunRecord]]:
    """Per loss, the records its row folds together: those of the configuration of the loss's
    newest record (:func:`latest_per_loss`), the newest per seed, sorted by seed.

    Records of another configuration (e.g. an older run with ``--set`` overrides) are not mixed in.
    """
    out: dict[str, list[RunRecord]] = {}
    typed = sorted(map(as_record, records), key=lambda r: (r.created, r.loss))
    for newest in latest_per_loss(typed):
        key = replicate_key(newest)
        per_seed: dict[int | None, RunRecord] = {}
        for r in typed:
            if r.loss == newest.loss and replicate_key(r) == key:
                per_seed[r.seed] = r
        out[newest.loss] = sorted(per_seed.values(), key=lambda r: (r.seed is None, r.seed or 0))
    return out


#: Largest record file read (a paper-budget record is a few MB): a bigger one is refused unread.
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: Deepest nesting of objects and arrays in a record (the schema needs fewer than 10 levels): deeper
#: is refused instead of exhausting Python's recursion limit.
MAX_RECORD_DEPTH = 64


def read_record_json(path: Path) -> Any:
    """The parsed JSON of a record file within :data:`MAX_RECORD_BYTES` and :data:`MAX_RECORD_DEPTH`.

    Unreadable JSON, a file too big or nested too deep are a :class:`RecordError` naming the file.
    """
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise RecordError(
                f"Run record {path} is {size:,} bytes, over the {MAX_RECORD_BYTES:,}-byte limit of a "
                "record; it is not read."
            )
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"Run record {path} cannot be read: {exc}") from None
    except RecursionError:
        # The C parser stops at the interpreter's recursion limit, far deeper than MAX_RECORD_DEPTH.
        raise RecordError(
            f"Run record {path} is nested deeper than {MAX_RECORD_DEPTH} levels (the limit of a record)."
        ) from None
    if _depth_exceeds(data, MAX_RECORD_DEPTH):
        raise RecordError(
            f"Run record {path} is nested deeper than {MAX_RECORD_DEPTH} levels (the limit of a record)."
        )
    return data


def _depth_exceeds(data: Any, limit: int) -> bool:
    """Whether objects/arrays in ``data`` nest deeper than ``limit`` (iterative: no recursion)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def load_record(path: Path) -> RunRecord:
    """Read and validate one record file (unreadable, too big or too deep: a :class:`RecordError`)."""
    return parse_record(read_record_json(path), str(path))


def load_records(folder: Path) -> list[RunRecord]:
    """Every record in ``folder`` (``*.json``), validated, oldest first (by ``created``, then loss).

    A file that is not readable JSON (e.g. truncated by a full disk), bigger than
    :data:`MAX_RECORD_BYTES` or nested deeper than :data:`MAX_RECORD_DEPTH` is skipped with a warning, so
    one damaged file does not hide every other result; a readable record that breaks the schema is
    a :class:`RecordError` naming the file and the key.
    """
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_record_json(path)
        except RecordError as exc:  # not JSON, too big or nested too deep: the file is not a record
            print(f"dmlbench: warning: skipping unreadable record {path}: {exc}", file=sys.stderr)
            continue
        if not isinstance(data, Mapping):
            print(f"dmlbench: warning: skipping {path}: not a run record (a JSON object)", file=sys.stderr)
            continue
        records.append(parse_record(data, str(path)))
    return sorted(records, key=lambda r: (r.created, r.loss))


def nan_if_none(x: float | None) -> float:
    """``None`` -> NaN (a missing value in a table cell)."""
    return math.nan if x is None else float(x)
