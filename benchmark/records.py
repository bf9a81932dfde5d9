"""The run record's schema: one declaration for writing and reading, with a kind and a version.

A run writes one JSON record (``results/<dataset>/<protocol>/records/*.json``). The schema is
declared once, by the TypedDicts below (:class:`RunRecordDoc` and its parts; a plugin's entry is
:class:`benchmark.registry.PluginSourceDoc`): the writers build them (mypy checks every key and
type), and every reader of records (leaderboards, plots, significance tables, published-value
joins, the Python API) goes through :func:`parse_record` / :func:`load_records`, which validate a
document by walking the same annotations (:func:`parse_document`) and return it typed by them:
:attr:`RunRecord.parsed` is a :class:`RunRecordDoc`, :attr:`RunRecord.test` and
:attr:`RunRecord.search` its parts; :class:`RunRecord`'s other fields are derived from it. How a
reader treats an absent or null key is declared beside the key (``Annotated[T, Read(...)]``,
:mod:`benchmark.schema`). A record that breaks the schema is a :class:`RecordError` naming the
file, the key (as a dotted path) and the expected type; sections typed ``dict[str, Any]``
(``environment``, ``execution``, ``rep_details`` ...) are checked as objects only.

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
summaries; each declared by its key's ``Read``), so hand-made and partial records (tests, older
runs) still render. A required key such a record lacks reads as its default, or None where its
type admits None; an optional key stays absent. Reading adds nothing else: a record written by
the current writers reads back as the same document, byte for byte when written again.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from types import UnionType
from typing import (
    Annotated,
    Any,
    NoReturn,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from benchmark.config import Deviation, flatten, is_neutral
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.moved_keys import current_layout
from benchmark.registry import PluginSource, PluginSourceDoc, Registry
from benchmark.schema import NEEDED, Read

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


#: The built-in protocol kinds, each ``PROTOCOL`` of ``benchmark.protocol.<kind>`` (the one list:
#: :data:`benchmark.protocol.registry.BUILTIN_KINDS` is this tuple; it lives here, the lower layer).
BUILTIN_PROTOCOL_KINDS = ("mlrc", "traditional", "cbir")

#: The record kinds, the kinds of the protocols that write records (see the module docstring).
RECORD_KINDS: Registry[RecordKind] = Registry("record kind", group="dmlbench.protocols", adopt=_adopt_kind)
for _builtin in BUILTIN_PROTOCOL_KINDS:  # the built-in protocols: their declarations register them
    RECORD_KINDS.register_lazy(_builtin, f"benchmark.protocol.{_builtin}:PROTOCOL")


def register_record_kind(kind: RecordKind) -> RecordKind:
    """Make ``kind`` a record kind that readers accept (a protocol's registration calls this)."""
    return RECORD_KINDS.register(kind.name, kind)


class RecordError(DmlbenchError):
    """A record that does not follow the schema: names the file, the key and what was expected."""


# -- the schema: the written document, read as it is written ----------------------------------
# The one declaration of a record (schema SCHEMA): the protocols' record writers build these
# TypedDicts (benchmark.protocol.base.ProtocolRun.record_header, mlrc_run and repeated
# build_record; mypy checks every key and type), and parse_record validates a document by walking
# the same annotations (_parse_value), so a reader holds the very types the writers built.
# TypedDicts are plain dicts at run time: the JSON is what the writers always wrote (key order
# included). Every key a run writes is declared (required: written by every protocol; optional:
# by some). How a reader treats an absent or null key is declared beside the key (Annotated[T,
# Read(...)], benchmark.schema); without one, an absent key is allowed (older and hand-made
# records: the leniency of the module docstring): a required one reads as None when its type
# admits None, an optional one stays absent.
# Sections no reader parses stay dict[str, Any]. A new optional key keeps SCHEMA_VERSION;
# renaming or removing one is a new version.


class IntervalDoc(TypedDict):
    """A summary over repetitions (:func:`benchmark.engine.evaluation.interval_dict`); null where
    the value was NaN (no value, no interval: one repetition)."""

    mean: Annotated[float | None, NEEDED]
    half_width: float | None
    n: int
    low: float | None
    high: float | None


class DeviationDoc(TypedDict):
    """A :class:`benchmark.config.Deviation` as the record holds it (an entry of ``deviations``)."""

    key: Annotated[str, NEEDED]
    paper: Any
    value: Any


class ParamRangeDoc(TypedDict):
    """``search.space[name]``: a searched hyperparameter's range."""

    low: Annotated[float, NEEDED]
    high: Annotated[float, NEEDED]
    log: Annotated[bool, Read(default=lambda: False)]


class _FoldDoc(TypedDict):
    best_val_map_at_r: float
    best_epoch: int | None
    epochs: int
    stopped_by: str
    wall_s: float
    curve: Annotated[list[tuple[float, float]], Read(default=list, null=True)]


class FoldDoc(_FoldDoc, total=False):
    """A fold training of a search trial (``search.trials[i].folds[k]``): the fold's result as
    :meth:`benchmark.engine.train.FoldResult.to_dict` writes it (through the Optuna trial's
    attributes, hence untyped until here): its validation curve of ``(epoch, value)`` pairs, best
    epoch, why it stopped and (since results carry it) the code that trained it."""

    code: str


class TrialDoc(TypedDict):
    """One search trial (``search.trials[i]``, written by
    :meth:`benchmark.protocol.search_stage.SearchStage.trial_records`)."""

    number: int | None
    state: Annotated[str, NEEDED]
    origin: str | None
    params: Annotated[dict[str, float], Read(default=dict, null=True)]
    value: float | None
    sampler_value: float | None
    interruptions: int
    fold_sem: float | None
    wall_s: float | None
    failure: Any
    interrupted: bool
    folds: Annotated[list[FoldDoc], Read(default=list, null=True)]


class SearchDoc(TypedDict):
    """``search`` of an MLRC record (``trials``: the search stage's)."""

    sampler: str
    n_trials: Annotated[int, NEEDED]
    space: Annotated[dict[str, ParamRangeDoc], Read(default=dict, null=True)]
    fixed: dict[str, float]
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, float]
    trials: Annotated[list[TrialDoc], Read(default=list)]


def completed_trials(search: SearchDoc) -> int:
    """How many trials of ``search`` completed."""
    return sum(1 for t in search["trials"] if t["state"] == "COMPLETE")


class _RecordTestDoc(TypedDict):
    reps: Annotated[int, NEEDED]
    metrics: Annotated[list[str], Read(required=True, expected="a list of metric names")]
    per_rep: Annotated[dict[str, dict[str, list[float]]], Read(default=dict, null=True)]
    summary: Annotated[dict[str, dict[str, IntervalDoc]], Read(default=dict, null=True)]
    rep_details: list[dict[str, Any]]


class RecordTestDoc(_RecordTestDoc, total=False):
    """``test``: ``modes`` (with ``mode_labels``) where the record kind has no default modes (see
    :attr:`RunRecord.modes`), ``extra_*`` for further per-rep quantities (e.g. cbir's query times)."""

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
    created: Annotated[str, Read(default=lambda: "", null=True)]
    protocol: Annotated[str, Read(default=lambda: "", null=True)]
    dataset: Annotated[str, Read(default=lambda: "", null=True)]
    loss: Annotated[str, NEEDED]
    #: Absent or null: read as ``loss``.
    loss_display_name: Annotated[str, Read(null=True)]
    embedding_space: str
    budget: Annotated[str, Read(default=lambda: "unknown", null=True)]
    seed: Annotated[int, Read(null=True)]
    run_dir: str
    config: Annotated[dict[str, Any], Read(default=dict, null=True)]
    deviations: Annotated[list[DeviationDoc], Read(default=list)]
    trunk_weights: dict[str, Any] | None
    dataset_paper_settings: dict[str, Any]
    schedule: dict[str, Any]
    loss_dataset_defaults: dict[str, float]


class RecordExtras(TypedDict, total=False):
    """Top-level entries of one protocol's records (``RepeatedRun.record_extras``; cbir's ``two_stage``)."""

    two_stage: bool


class _RunRecordDoc(RecordHeader):
    data: dict[str, Any]
    environment: Annotated[dict[str, Any], Read(default=dict, null=True)]
    test: Annotated[RecordTestDoc, NEEDED]
    # Null where the value was NaN (benchmark.io writes NaN as null).
    untrained: Annotated[
        dict[str, dict[str, Annotated[float, Read(null=True)]]], Read(default=dict, null=True)
    ]
    timings_s: Annotated[dict[str, Annotated[float, Read(null=True)]], Read(default=dict, null=True)]
    execution: dict[str, Any]


class RunRecordDoc(_RunRecordDoc, RecordExtras, total=False):
    """A whole run record as written, version :data:`SCHEMA_VERSION`: the header, the protocol's
    results, then what is added from them (``convergence``) and when it is written (``code``).
    ``search``: MLRC; ``selection_on_test``, ``notes``, ``training``: the search-free protocols."""

    search: Annotated[SearchDoc, Read(null=True)]
    selection_on_test: bool
    notes: list[str]
    training: dict[str, Any]
    convergence: dict[str, Any]
    code: dict[str, Any]


# -- the record as read -----------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """A validated run record (schema :data:`SCHEMA`; a missing ``kind`` derived).

    :attr:`parsed` is the document as the schema's TypedDicts type it (:class:`RunRecordDoc`, the
    type the writers built), with the read defaults filled in; :attr:`test`, :attr:`search` and the
    identity fields are its parts, and the rest are what a reader derives from it (the kind, the
    evaluation modes, the code version, the plugin sources and deviations as their own types).
    """

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
    test: RecordTestDoc
    #: (mode, label) column groups: the record's ``test.modes`` or its kind's default modes.
    modes: tuple[tuple[str, str], ...]
    #: Whether the record named its modes itself (``test.modes``).
    named_modes: bool
    # Null where the value was NaN, hence ``| None`` (the declaration says so in its Read).
    untrained: Mapping[str, Mapping[str, float | None]]
    deviations: tuple[Deviation, ...]
    notes: tuple[str, ...]
    plugins: tuple[PluginSource, ...]
    search: SearchDoc | None
    timings_s: Mapping[str, float | None]
    #: The document as the schema types it, read defaults filled in.
    parsed: RunRecordDoc = field(repr=False, compare=False)
    #: What the migration derived (empty for a record with every field of the current schema).
    migrated: tuple[str, ...] = ()
    #: The whole JSON document as read, for fields outside this schema.
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def has_mode(self, mode: str) -> bool:
        """Whether this record evaluates ``mode``."""
        return any(m == mode for m, _ in self.modes)

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

    def recorded(self, section: str, key: str) -> Any:
        """``document[section][key]`` as written, None where absent (a record older than the key)."""
        part = self.document.get(section)
        return part.get(key) if isinstance(part, Mapping) else None

    def recorded_text(self, section: str, key: str) -> str:
        """:meth:`recorded` as text (:func:`recorded_as_text`)."""
        return recorded_as_text(self.recorded(section, key))

    def training_wall_s(self) -> float | None:
        """``timings_s["search"] + timings_s["test"]``, None when either is missing (a lower bound
        when :attr:`invocations_without_timings` is above 0; the extra trials and the test stage
        only when :attr:`search_extended`)."""
        search, test = self.timings_s.get("search"), self.timings_s.get("test")
        return None if search is None or test is None else search + test

    @property
    def search_extended(self) -> bool:
        """Whether the search started from another run's trials (``--extend-search``): the
        record's ``timings_s`` then cover only its extra trials and its test stage, the source's
        stay under ``execution.search_extended_from`` (docs/protocols.md)."""
        return bool((self.parsed.get("execution") or {}).get("search_extended_from"))

    @property
    def invocations_without_timings(self) -> int | None:
        """Invocations of the run that ended without saving their timings (a SIGKILL, a power loss):
        above 0, ``timings_s`` misses their time. None where the record cannot tell (written before
        runs counted their starts, resumed in a run directory from then, or with a database study)."""
        value = (self.parsed.get("execution") or {}).get("invocations_without_timings")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


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

    def obj(self, value: object, key: str, expected: str = "an object") -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(key, expected, value)
        return value

    def opt_obj(self, data: Mapping[str, Any], name: str, key: str) -> Mapping[str, Any]:
        value = data.get(name)
        return {} if value is None else self.obj(value, key + name)

    def integer(self, value: object, key: str, expected: str = "an integer") -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(key, expected, value)
        return value

    def number(self, value: object, key: str, expected: str = "a number") -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            self.fail(key, expected, value)
        return float(value)

    def seq(self, value: object, key: str, expected: str = "a list") -> Sequence[Any]:
        if not isinstance(value, list):
            self.fail(key, expected, value)
        return value


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
        kind = data["kind"]
        if not isinstance(kind, str):
            check.fail("kind", "a string", kind)
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


def _expected(tp: Any, rule: Read) -> str:
    """How an error names what the annotation ``tp`` expects (``a number or null``)."""
    if rule.expected is not None:
        return rule.expected
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    args = get_args(tp) if get_origin(tp) in (Union, UnionType) else ()
    if args and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return f"{_expected(inner, Read())} or null"
    base = get_origin(tp) or tp
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list"}
    if base is tuple:
        return f"a list of {len(get_args(tp))} numbers"
    if base is dict or is_typeddict(base):
        return "an object"
    text = names.get(base, "anything")
    return f"{text} or null" if rule.null else text


def _unwrap(tp: Any) -> tuple[Any, Read]:
    """The type of an annotation and its :class:`Read` rule (``Annotated[T, Read(...)]``)."""
    if get_origin(tp) is Annotated:
        inner, *meta = get_args(tp)
        return inner, next((m for m in meta if isinstance(m, Read)), Read())
    return tp, Read()


@cache
def _keys(doc_type: type) -> dict[str, Any]:
    """A TypedDict's keys and their annotations (the inherited ones included, metadata kept)."""
    return get_type_hints(doc_type, include_extras=True)


def _parse_value(check: _Check, value: object, annotation: Any, key: str) -> Any:
    """``value`` checked against a schema annotation: the parsed value (a TypedDict's read
    defaults filled in, numbers as float where the schema says float, ``(epoch, value)`` pairs as
    tuples), or a :class:`RecordError` naming ``key`` (a dotted path) and what was expected.

    Keys a TypedDict does not declare are kept as they are (a record of a later dmlbench within
    the same version may carry more)."""
    tp, rule = _unwrap(annotation)
    expected = _expected(tp, rule)
    args = get_args(tp) if get_origin(tp) in (Union, UnionType) else ()
    if value is None and (rule.null or type(None) in args):
        return rule.default() if rule.default is not None else None
    if args:  # X | None (the only unions of the schema) with a value
        (tp,) = [a for a in args if a is not type(None)]
    base = get_origin(tp) or tp
    if tp is Any:
        return value
    if base is float:  # an int is a float here (typing's numeric tower), kept as written
        check.number(value, key, expected)
        return value
    if base is int:
        return check.integer(value, key, expected)
    if base in (str, bool):
        if not isinstance(value, base):
            check.fail(key, expected, value)
        return value
    if base is list:
        (item,) = get_args(tp)
        return [
            _parse_value(check, v, item, f"{key}[{i}]") for i, v in enumerate(check.seq(value, key, expected))
        ]
    if base is tuple:
        items = check.seq(value, key, expected)
        if len(items) != len(get_args(tp)):
            check.fail(key, expected, items)
        return tuple(_parse_value(check, v, a, key) for v, a in zip(items, get_args(tp), strict=True))
    if base is dict:
        _, item = get_args(tp)
        return {
            k: _parse_value(check, v, item, f"{key}.{k}") for k, v in check.obj(value, key, expected).items()
        }
    if is_typeddict(tp):
        return _parse_doc(check, check.obj(value, key, expected), tp, f"{key}." if key else "")
    raise TypeError(f"benchmark.records: the schema annotation {annotation!r} of {key!r} is not readable")


def _parse_doc(check: _Check, data: Mapping[str, Any], doc_type: type, prefix: str) -> dict[str, Any]:
    """A TypedDict ``doc_type`` read from ``data`` (see :func:`_parse_value`; keys in their order)."""
    keys = _keys(doc_type)
    out = {
        name: _parse_value(check, value, keys[name], prefix + name) if name in keys else value
        for name, value in data.items()
    }
    for name, annotation in keys.items():
        if name in out:
            continue
        tp, rule = _unwrap(annotation)
        if rule.required:
            check.missing(prefix + name, _expected(tp, rule))
        if name not in doc_type.__required_keys__:  # type: ignore[attr-defined]
            continue  # an optional key stays absent: readers .get it, as its type says
        if rule.default is not None:
            out[name] = rule.default()
        elif get_origin(tp) in (Union, UnionType) and type(None) in get_args(tp):
            out[name] = None
    return out


def parse_document(data: Mapping[str, Any], source: str = "<record>") -> RunRecordDoc:
    """A record document validated against the schema (:class:`RunRecordDoc`) and typed by it:
    the writers' own type, with the read defaults filled in (the input is not changed)."""
    return cast(RunRecordDoc, _parse_doc(_Check(source), data, RunRecordDoc, ""))


def _modes(check: _Check, test: RecordTestDoc, kind: str) -> tuple[tuple[str, str], ...]:
    """The (mode, label) column groups: ``test.modes`` or the kind's default modes."""
    if "modes" in test:
        labels = test.get("mode_labels", {})
        return tuple((m, labels.get(m, m)) for m in test["modes"])
    default = RECORD_KINDS.get(kind).default_modes
    if default is None:
        check.missing("test.modes", f"a list of mode names; a {kind} record names its evaluation modes")
    return default


#: How far a stored summary may be from the one its per-rep values give (float round-off only).
SUMMARY_RTOL = 1e-6


def _check_values(check: _Check, test: RecordTestDoc, confidence: float) -> None:
    """Values, not just shapes: finite numbers, as many per-rep values as ``test.reps``, and
    summaries that are the t-intervals of their per-rep values. A record failing these would be
    rendered (a 1e999 mean shown bold as the best), so it is refused, naming the key."""
    reps, summary, per_rep = test["reps"], test["summary"], test["per_rep"]
    cells = [(f"test.summary.{mode}.{m}", c) for mode, cs in summary.items() for m, c in cs.items()]
    cells += [(f"test.extra_summary.{name}", c) for name, c in test.get("extra_summary", {}).items()]
    for key, cell in cells:
        mean, half_width = cell["mean"], cell["half_width"]
        if mean is not None and not math.isfinite(mean):
            check.fail(f"{key}.mean", "a finite number or null", mean)
        if half_width is not None and not (math.isfinite(half_width) and half_width >= 0):
            check.fail(f"{key}.half_width", "a finite number >= 0 or null", half_width)
    for mode, values in per_rep.items():
        for m, reps_values in values.items():
            key = f"test.per_rep.{mode}.{m}"
            for i, v in enumerate(reps_values):
                if not math.isfinite(v):
                    check.fail(f"{key}[{i}]", "a finite number", v)
            if len(reps_values) != reps:
                check.fail(key, f"a list of test.reps = {reps} values", list(reps_values))
            stored = summary.get(mode, {}).get(m)
            if stored is None or stored["mean"] is None or not reps_values:
                continue
            from benchmark.stats.intervals import t_interval

            ref = t_interval(reps_values, confidence)
            if not math.isclose(stored["mean"], ref.mean, rel_tol=SUMMARY_RTOL, abs_tol=1e-12):
                check.fail(
                    f"test.summary.{mode}.{m}.mean", f"the mean of {key} ({ref.mean!r})", stored["mean"]
                )
            hw = stored["half_width"]
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


def _plugin_sources(plugins: Sequence[PluginSourceDoc]) -> tuple[PluginSource, ...]:
    # The type the run wrote (benchmark.registry.PluginSource.to_dict): one schema.
    return tuple(
        PluginSource(
            p["kind"],
            p["name"],
            p["ref"],
            p["module"],
            p["file"],
            p["sha256"],
            p["distribution"],
            p["version"],
        )
        for p in plugins
    )


def parse_plugins(data: Mapping[str, Any], source: str = "<record>") -> tuple[PluginSource, ...]:
    """``plugins`` of a record document: where its outside components came from (may be absent)."""
    keys = _keys(PluginsDoc)
    return _plugin_sources(_parse_value(_Check(source), data.get("plugins", []), keys["plugins"], "plugins"))


def parse_record(data: object, source: str = "<record>") -> RunRecord:
    """Validate a record document (parsed JSON) and return it typed (a missing ``kind`` derived).

    ``source`` (the file) is named in every :class:`RecordError`.
    """
    check = _Check(source)
    if not isinstance(data, Mapping):
        raise RecordError(f"Run record {source}: not a JSON object (found {_describe(data)}).")
    version = schema_version(data, source)
    kind, migrated = _kind(data, check)
    doc = parse_document(data, source)
    config = doc["config"]
    model = check.opt_obj(config, "model", "config.")
    protocol_section = check.opt_obj(config, "protocol", "config.")
    git = check.opt_obj(doc["environment"], "git", "environment.")
    test = doc["test"]
    modes = _modes(check, test, kind)
    test_config = config.get("test")
    level = test_config.get("confidence", 0.95) if isinstance(test_config, Mapping) else 0.95
    confidence = float(level) if isinstance(level, int | float) and 0 < level < 1 else 0.95
    _check_values(check, test, confidence)
    seed: int | None = doc.get("seed")
    return RunRecord(
        source=source,
        version=version,
        kind=kind,
        protocol=doc["protocol"],
        dataset=doc["dataset"],
        loss=doc["loss"],
        loss_display_name=doc.get("loss_display_name") or doc["loss"],
        budget=doc["budget"],
        seed=seed,
        created=doc["created"],
        git_commit=str(git.get("commit", "unknown")),
        dirty=bool(git.get("dirty")),
        embedding_dim=model.get("embedding_dim") if isinstance(model.get("embedding_dim"), int) else None,
        n_folds=protocol_section.get("n_folds") if isinstance(protocol_section.get("n_folds"), int) else None,
        test=test,
        modes=modes,
        named_modes="modes" in test,
        untrained=doc["untrained"],
        # The type the run derived and wrote (benchmark.config.deviations): one schema.
        deviations=tuple(Deviation(d["key"], d.get("paper"), d.get("value")) for d in doc["deviations"]),
        notes=tuple(doc.get("notes", [])),
        plugins=_plugin_sources(doc.get("plugins", [])),
        search=doc.get("search"),
        timings_s=doc["timings_s"],
        parsed=doc,
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


#: The board-settings key of the trunk weights' checksum (the record's ``trunk_weights.sha256``;
#: None without pretrained weights). Not a config key: the record's ``trunk_weights`` block holds it.
TRUNK_SHA256 = "trunk_weights.sha256"
#: A setting one record has and the other lacks, as :class:`SettingChange` holds it.
ABSENT = "(absent)"


def _resolved_config(r: RunRecord) -> dict[str, Any]:
    """``r``'s resolved config in today's layout as plain JSON values, without ``data.data_dir``.

    The one canonicalisation of a record's config for comparing records (replicates, boards).
    """
    return _canonical_config(r.document.get("config", {}))


def _canonical_config(config_doc: Mapping[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(current_layout(config_doc), sort_keys=True, default=str))
    if isinstance(config.get("data"), dict):
        # Where the data lay differs between machines; what data it was is data.dataset and the rest.
        config["data"].pop("data_dir", None)
    return cast(dict[str, Any], config)


def board_settings(record: RunRecord | Mapping[str, Any]) -> dict[str, Any]:
    """The settings a record shares with every record a leaderboard section ranks it against:
    dotted keys (sorted) -> values, from its resolved config read in today's layout
    (:func:`benchmark.moved_keys.current_layout`, as :func:`replicate_key` reads it).

    Left out, because the rows of one board legitimately differ in them:

    * ``loss`` and ``space``: the loss's own fixed parameters and its search-range overrides
      (``--set loss.X`` / ``space.X``). They belong to the loss's row: the deviations footer lists
      them (key ``loss`` / ``space``) and :func:`replicate_key` keeps such a row apart from the
      loss's other configurations; losses with different parameters are what a board compares.
    * ``data.data_dir``: where the data lay (differs between machines, not what was measured).
    * ``model.trunk_weights`` when it is a file path (also a location: the same file lies at
      different paths on different machines); a built-in name (``builtin:NAME``) is kept.
    * ``protocol.description``: the protocol file's one-line label for people; editing its wording
      changes nothing a run computes, so it must not split a board.
    * a key of :data:`benchmark.config.NEUTRAL_DEFAULTS` at its neutral value: added after records
      existed, at the value that reproduces the earlier computation, so records written before it
      and after it share board settings (a non-neutral value counts).

    Added: :data:`TRUNK_SHA256`, the checksum of the trunk weights the run loaded (the record's
    ``trunk_weights.sha256``), so weights of one name but other bytes are other settings.
    Everything else counts (budget-set values such as ``train.patience``, ``test.reps``,
    ``search.n_trials``, the trunk, the protocol), and so does a key one record has and another
    lacks. The seed is not part of ``config``.
    """
    r = as_record(record)
    return settings_of(r.document.get("config", {}), r.document.get("trunk_weights"))


def settings_of(config_doc: Mapping[str, Any], trunk_weights: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`board_settings` of a run not yet made: its config as a record stores it
    (``config_to_dict``) and the record's ``trunk_weights`` block (``weights_record``; None
    without pretrained weights). A driver compares it with a committed record's to tell whether
    that record is at the settings a run would now use (``benchmarks/regenerate_boards.py``).
    """
    config = _canonical_config(config_doc)
    config.pop("loss", None)
    config.pop("space", None)
    flat = flatten(config)
    flat.pop("protocol.description", None)
    # A key added after a record was written, at the value that reproduces what runs did before it
    # existed, is no setting of its own: a record that lacks it and a new one that holds it
    # computed the same thing (the rule regress identities follow too).
    flat = {key: value for key, value in flat.items() if not is_neutral(key, value)}
    weights = flat.get("model.trunk_weights")
    # benchmark.models.pretrained.is_builtin's rule (this reader imports no writer's code).
    if isinstance(weights, str) and weights and not weights.startswith("builtin:"):
        del flat["model.trunk_weights"]
    flat[TRUNK_SHA256] = trunk_weights.get("sha256") if isinstance(trunk_weights, Mapping) else None
    return dict(sorted(flat.items()))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def board_key(record: RunRecord | Mapping[str, Any]) -> str:
    """A short hash of :func:`board_settings`: records of equal keys may share a leaderboard section."""
    return settings_key(board_settings(record))


def settings_key(settings: Mapping[str, Any]) -> str:
    """The short hash :func:`board_key` gives board settings (also of :func:`settings_of`)."""
    return _digest(dict(settings))


@dataclass(frozen=True)
class SettingChange:
    """A board setting whose value differs between two records (:data:`ABSENT` where one lacks it)."""

    key: str
    value: Any
    other: Any

    @property
    def text(self) -> str:
        """``train.patience: 2 → 5`` (``value → other``)."""
        return f"{self.key}: {_setting_text(self.key, self.value)} → {_setting_text(self.key, self.other)}"


def _setting_text(key: str, value: Any) -> str:
    if isinstance(value, str):
        # 12 hex digits tell two checksums apart in a note.
        return value[:12] if key == TRUNK_SHA256 else value
    return json.dumps(value)


def settings_diff(
    record: RunRecord | Mapping[str, Any], other: RunRecord | Mapping[str, Any]
) -> list[SettingChange]:
    """The board settings (:func:`board_settings`) in which ``record`` differs from ``other``, by key."""
    a, b = board_settings(record), board_settings(other)
    return [
        SettingChange(k, a.get(k, ABSENT), b.get(k, ABSENT))
        for k in sorted(a.keys() | b.keys())
        if a.get(k, ABSENT) != b.get(k, ABSENT)
    ]


def settings_groups(records: Sequence[RunRecord | Mapping[str, Any]]) -> list[list[RunRecord]]:
    """``records`` split by :func:`board_key`: the group of the newest record first (by ``created``,
    as :func:`latest_per_loss` orders them), then the others by their newest record, newest first;
    each group oldest first. Records that all share board settings are one group (none: none)."""
    groups: dict[str, list[RunRecord]] = {}
    for r in sorted(map(as_record, records), key=lambda r: (r.created, r.loss)):
        groups.setdefault(board_key(r), []).append(r)
    # A group's last record is its newest; the dict keeps first-seen order, so sort by that.
    return sorted(groups.values(), key=lambda g: (g[-1].created, g[-1].loss), reverse=True)


def replicate_key(record: RunRecord | Mapping[str, Any]) -> str:
    """What makes records replicates of one row (docs/protocols.md §4.5): the loss, its board
    settings (:func:`board_settings`: the resolved configuration in today's layout, without where
    the data and trunk weights lay, with the weights' checksum), its own parameters and search
    range overrides (``config.loss``, ``config.space``) and the ranges and fixed parameters it
    searched with (``search.space``, ``search.fixed``: a loss's default ranges are code, so seeds
    run before and after a range changed differ only there). The seed is not part of ``config``."""
    r = as_record(record)
    config = _resolved_config(r)
    return _digest(
        {
            "loss": r.loss,
            "settings": board_settings(r),
            "params": config.get("loss"),
            "space": config.get("space"),
            "searched": recorded_search(r.document),
        }
    )


def recorded_search(document: Mapping[str, Any]) -> dict[str, Any]:
    """A record document's ``{"space": ..., "fixed": ...}`` (None where the record lacks one)."""
    search = document.get("search")
    search = search if isinstance(search, Mapping) else {}
    return {"space": search.get("space"), "fixed": search.get("fixed")}


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


def recorded_as_text(value: Any) -> str:
    """A value of :meth:`RunRecord.recorded` as tables and warnings show it: "unrecorded" for
    None (a record older than the key)."""
    return "unrecorded" if value is None else str(value)


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
