"""Strict, typed run configuration.

A run's configuration is built in layers: the protocol file (``<name>.toml`` in ``protocols/`` or
a directory of the include path :data:`PROTOCOL_PATH_VAR`, the paper's numbers), then the
budget's overrides, then the user's ``--set key=value`` overrides.
Every layer is validated against the dataclasses below before any compute starts: an unknown
key or a value of the wrong type is a :class:`ConfigError` that names the key.

Deviations from the paper are *derived* by diffing the resolved config against the protocol
file alone, so they can never be forgotten or hand-typed.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib.resources
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomllib

from benchmark.checks import check_name
from benchmark.errors import ConfigError, UnknownNameError
from benchmark.moved_keys import moved_key_message

T = TypeVar("T")


def protocols_dir() -> Path:
    """Where the protocol files are: ``protocols/`` of a source checkout, else the installed copy.

    One copy exists in the tree (``protocols/`` at its top, docs/protocols.md §1); a wheel ships it as
    ``benchmark/protocols/`` (setup.py), found here with importlib.resources. The checkout wins
    so that a developer running from a clone (``PYTHONPATH``) reads the files being edited.
    """
    tree = Path(__file__).resolve().parent.parent
    if (tree / "pyproject.toml").is_file() and (tree / "protocols").is_dir():
        return tree / "protocols"
    return Path(str(importlib.resources.files("benchmark") / "protocols"))


PROTOCOLS_DIR = protocols_dir()

#: The protocol files' include path: directories (``os.pathsep``-separated) searched after the
#: built-in ``protocols/``, whose names are never shadowed. ``dmlbench run --protocol-file PATH``
#: adds its file's directory; spawned worker processes inherit it.
PROTOCOL_PATH_VAR = "DMLBENCH_PROTOCOL_PATH"


@dataclass(frozen=True)
class ProtocolSection:
    """Which protocol this is and how it splits the classes."""

    name: str = "mlrc"
    description: str = ""
    n_folds: int = 4
    # A split setting that only one protocol reads is that protocol's own (its [settings] block,
    # e.g. cbir's query_fraction; benchmark.moved_keys lists the keys that used to be here).


@dataclass(frozen=True)
class DataConfig:
    """Dataset choice and image geometry."""

    dataset: str = "glyphs"
    data_dir: str = ""
    image_size: int = 227
    augment: str = "paper"
    # Deterministic subsetting for small CI/regression runs: the first N classes in sorted id
    # order and the first K images of each class (0 = all).
    max_classes: int = 0
    max_per_class: int = 0


@dataclass(frozen=True)
class ModelConfig:
    """Trunk and embedder."""

    trunk: str = "bninception"
    pretrained: bool = True
    trunk_weights: str = ""
    embedding_dim: int = 128
    freeze_trunk_bn: bool = True
    # Frozen-trunk mode: trunk features computed once and cached on disk; only the embedder trains
    # (benchmark.models.features). Requires data.augment = "none".
    frozen_trunk: bool = False
    # BatchNorm gamma/beta frozen too (not only the running statistics), as the Mean-Field
    # authors' code does (benchmark.engine.training_options).
    freeze_trunk_bn_affine: bool = False
    # Global pooling of the trunk's last feature map: "avg" (MLRC) or "avg+max" (their sum, the
    # Proxy-Anchor / Mean-Field code's BN-Inception).
    pooling: str = "avg"
    # Embedder initialisation: "default" (torch's Linear init, MLRC) or "kaiming" (He normal,
    # fan-out, zero bias, as the Proxy-Anchor / Mean-Field code).
    embedder_init: str = "default"


@dataclass(frozen=True)
class TrainConfig:
    """One fold's training schedule (docs/protocols.md §2.2)."""

    batch_size: int = 32
    iters_per_epoch: int = 100
    max_epochs: int = 1000
    eval_every: int = 2
    patience: int = 5
    lr: float = 1e-6
    weight_decay: float = 1e-4
    momentum: float = 0.9
    param_momentum: float = 0.9
    # The traditional protocol's loop options (warm-up, lr decay, gradient clipping) are its own
    # settings (protocols/traditional.toml [settings]; benchmark.engine.training_options.LoopOptions).


@dataclass(frozen=True)
class SearchConfig:
    """Hyperparameter search (docs/protocols.md §2.3)."""

    n_trials: int = 50
    n_startup_trials: int = 5
    sampler: str = "gp"
    prune: bool = False
    # Search every linear range that spans two orders of magnitude or more (0 < low, high / low >=
    # 100, e.g. ArcFace's scale on [0.01, 200]) on a log scale (benchmark.losses.registry.log_if_wide).
    # MLRC searches them linearly with 50 trials; with a budget's few trials a linear range puts
    # almost no point in its lowest decades, where optima such as ArcFace's scale lie. Off for every
    # protocol (paper); a budget that turns it on records the deviation.
    log_wide_ranges: bool = False


@dataclass(frozen=True)
class TestConfig:
    """Test-stage retraining and evaluation (docs/protocols.md §2.4)."""

    reps: int = 10
    metrics: tuple[str, ...] = ("map_at_r", "precision_at_1", "r_precision")
    confidence: float = 0.95


#: The values of ``eval.knn``: exact search (the protocols' and the default) and faiss's
#: approximate indexes (benchmark.metrics.knn.KnnSearch, which reads this tuple).
KNN_KINDS = ("exact", "ivf", "hnsw")


@dataclass(frozen=True)
class EvalConfig:
    """How validation and test embeddings are searched for their nearest neighbours.

    ``knn = "exact"`` is every protocol's search; ``"ivf"`` and ``"hnsw"`` are faiss's approximate
    indexes, an explicit option for large test sets whose metrics are then estimates (a recorded
    deviation). ``ivf_nlist`` (0 = 4·sqrt(N)) and ``ivf_nprobe`` apply to IVF, ``hnsw_m`` and
    ``hnsw_ef_search`` to HNSW (see benchmark.metrics.knn.KnnSearch).
    """

    knn: str = "exact"
    ivf_nlist: int = 0
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_search: int = 128


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's results (plus the loss's fixed hyperparameters)."""

    protocol: ProtocolSection = field(default_factory=ProtocolSection)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    test: TestConfig = field(default_factory=TestConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # Loss hyperparameters fixed by the user (``--set loss.margin=0.1``): removed from the search.
    loss: Mapping[str, float] = field(default_factory=dict)
    # Search-range overrides per loss: ``[space.ms] alpha = [0.1, 10]`` in a protocol file or
    # ``--set 'space.ms.alpha=[0.1, 10]'``; the scale (log/linear) stays the loss's.
    space: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    # The protocol's own settings (``[settings]`` in its file, ``--set settings.KEY=V``): a table
    # whose keys and types the protocol declares (``ProtocolSpec.settings``, a dataclass) and
    # benchmark.protocol.registry.resolve_run_config validates as strictly as the sections above.
    # Left out of config_to_dict while empty, so that the configs (and hashes, run directories and
    # records) of the protocols without settings are what they were before this table existed.
    settings: Mapping[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Strict parsing of nested mappings into the dataclasses above.


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"Config key {key!r} must be a table/section, got {type(value).__name__}.")
        return _build(tp, value, key)
    if origin is tuple:
        (inner, _) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"Config key {key!r} must be a list, got {value!r}.")
        return tuple(_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict):
        _, value_type = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"Config key {key!r} must be a table, got {value!r}.")
        return {str(k): _coerce(v, value_type, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value  # the protocol's own settings: checked against its declaration (see RunConfig)
    if isinstance(tp, types.UnionType):
        raise ConfigError(f"internal: union type at {key!r} is not supported")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"Config key {key!r} must be true or false, got {value!r}.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"Config key {key!r} must be an integer, got {value!r}.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"Config key {key!r} must be a number, got {value!r}.")
        if not math.isfinite(value):
            # No setting means anything at nan or inf; TOML reads 1e400 as inf (float overflow).
            hint = " (a number beyond ±1.8e308 overflows to inf)" if math.isinf(value) else ""
            raise ConfigError(f"Config key {key!r} must be a finite number, got {value!r}{hint}.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"Config key {key!r} must be a string, got {value!r}.")
        return value
    raise ConfigError(f"internal: unsupported config type {_type_name(tp)} at {key!r}")


def _build(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(names))
    for key in unknown:
        moved = moved_key_message(_join(prefix, key))
        if moved is not None:
            raise ConfigError(moved)
    if unknown:
        where = f"section [{prefix}]" if prefix else "the top level"
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f" Did you mean {_join(prefix, close[0])!r}?" if close else ""
        raise ConfigError(
            f"Unknown config key {', '.join(repr(_join(prefix, u)) for u in unknown)} in {where}.{hint} "
            f"Valid keys there: {', '.join(names)}."
        )
    kwargs = {k: _coerce(v, hints[k], _join(prefix, k)) for k, v in data.items()}
    return cls(**kwargs)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def build_section(cls: type[T], data: Mapping[str, Any], prefix: str) -> T:
    """``data`` validated into the dataclass ``cls`` as a config section named ``prefix``: an
    unknown key or a value of the wrong type is a ConfigError naming ``prefix.key``."""
    return _build(cls, data, prefix)


def config_from_mapping(data: Mapping[str, Any]) -> RunConfig:
    """Validate a nested mapping (e.g. a parsed TOML file) into a :class:`RunConfig`."""
    return _build(RunConfig, data)


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """JSON-friendly nested dict of a config (tuples become lists)."""
    out: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(config)))
    if not out["settings"]:
        del out["settings"]  # see RunConfig.settings
    return out


def config_hash(config: RunConfig) -> str:
    """Short stable hash of the resolved config; runs with different configs never share a directory."""
    return config_dict_hash(config_to_dict(config))


def config_dict_hash(config: Mapping[str, Any]) -> str:
    """:func:`config_hash` of a config as written in a run directory's ``run.json``."""
    canonical = json.dumps(config, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def dotted_to_nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"train.lr": 1e-3}`` -> ``{"train": {"lr": 1e-3}}``."""
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        parts = key.split(".")
        if any(not p for p in parts):
            raise ConfigError(f"Malformed config key {key!r}: expected section.key, e.g. train.lr.")
        cur = nested
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
            if not isinstance(cur, dict):
                raise ConfigError(f"Config key {key!r} conflicts with another override.")
        cur[parts[-1]] = value
    return nested


def parse_set_option(item: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``; the value is read as TOML (numbers, booleans, lists, strings)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}.")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # bare words are strings: --set data.dataset=omniglot
    return key, value


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Protocol file {path} is not valid TOML: {exc}") from exc


def protocol_search_path(protocols_dir: Path | None = None) -> list[Path]:
    """The directories protocol files are found in, in order: ``protocols_dir`` alone when given,
    else the built-in ``protocols/`` and then the include path (:data:`PROTOCOL_PATH_VAR`)."""
    if protocols_dir is not None:
        return [protocols_dir]
    # PROTOCOLS_DIR is read at call time (not bound as a default) so that tests can point it elsewhere.
    extra = [Path(d) for d in os.environ.get(PROTOCOL_PATH_VAR, "").split(os.pathsep) if d]
    return [PROTOCOLS_DIR, *(d for d in extra if d != PROTOCOLS_DIR)]


def scan_protocols(protocols_dir: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """``(names, broken)``: the protocol files on the search path and the unreadable TOML files.

    A protocol file is a TOML file with a ``[protocol]`` table; other TOML files there (the
    ``dmlbench regress`` suite) are settings of other commands. ``broken`` maps the name of each
    file that is not valid TOML to the error: it may be a protocol, but one broken file must not
    stop the others (or ``dmlbench list``) from working. A name found in two directories is the
    first one's (:func:`protocol_search_path`).
    """
    names: list[str] = []
    broken: dict[str, str] = {}
    for directory in protocol_search_path(protocols_dir):
        for path in sorted(directory.glob("*.toml")):
            if path.stem in names or path.stem in broken:
                continue
            try:
                data = _read_toml(path)
            except ConfigError as exc:
                broken[path.stem] = str(exc)
                continue
            if "protocol" in data:
                names.append(path.stem)
    return sorted(names), broken


def protocol_names(protocols_dir: Path | None = None) -> list[str]:
    """Names of the readable protocol files on the search path (see :func:`scan_protocols`)."""
    return scan_protocols(protocols_dir)[0]


def protocol_path(name: str, protocols_dir: Path | None = None) -> Path:
    """``<dir>/<name>.toml`` of the first search-path directory that has it (else the first
    directory's); ``name`` must be a name (no ``/`` or ``..``: never a path elsewhere)."""
    file = f"{check_name('protocol', name)}.toml"
    dirs = protocol_search_path(protocols_dir)
    return next((d / file for d in dirs if (d / file).is_file()), dirs[0] / file)


def load_protocol_file(name: str, protocols_dir: Path | None = None) -> dict[str, Any]:
    """Parsed TOML of the protocol file ``name`` (validated later, as part of the merged config).

    Only this file is read (an invalid one is a ConfigError naming it and the TOML error); the
    others are read only to list the valid names when ``name`` is not a protocol.
    """
    path = protocol_path(name, protocols_dir)
    data = _read_toml(path) if path.is_file() else {}
    if "protocol" not in data:
        raise UnknownNameError("protocol", name, protocol_names(protocols_dir))
    return data


def add_protocol_file(path: Path) -> str:
    """``--protocol-file PATH``: the protocol name of the file (its stem, checked like any name),
    its directory added to the include path (:data:`PROTOCOL_PATH_VAR`, inherited by workers).

    A ConfigError when the file is missing, not TOML, has no ``[protocol]`` table, or its name is
    another protocol file's (a built-in one's above all: its name must not stand for other numbers).
    """
    file = path.expanduser().resolve()
    if not file.is_file() or file.suffix != ".toml":
        raise ConfigError(f"--protocol-file {str(path)!r}: no such .toml file ({file}).")
    try:
        name = check_name("protocol", file.stem)
    except ConfigError as exc:
        raise ConfigError(
            f"--protocol-file {str(path)!r}: the file name is the protocol's name; {exc}"
        ) from None
    if "protocol" not in _read_toml(file):
        raise ConfigError(
            f"--protocol-file {file}: a protocol file has a [protocol] table; this one has none."
        )
    taken = protocol_path(name)
    if taken.is_file() and taken.resolve() != file:
        raise ConfigError(
            f"--protocol-file {file}: protocol {name!r} is already {taken}; rename the file "
            "(records and leaderboards are kept by protocol name)."
        )
    dirs = [d for d in os.environ.get(PROTOCOL_PATH_VAR, "").split(os.pathsep) if d]
    if str(file.parent) not in dirs:
        os.environ[PROTOCOL_PATH_VAR] = os.pathsep.join([*dirs, str(file.parent)])
    return name


def protocol_kind(protocol_data: Mapping[str, Any]) -> str:
    """The ``[protocol] name`` of a parsed protocol file (which runner executes it); ``mlrc`` if unset."""
    section = protocol_data.get("protocol")
    if isinstance(section, Mapping) and isinstance(section.get("name"), str):
        return str(section["name"])
    return "mlrc"


#: A dataset's paper settings under a protocol: ``(dataset name, protocol name)`` -> dotted-key
#: settings (e.g. MLRC's per-dataset convergence schedule, docs/protocols.md §2.2). The runner passes one that
#: reads :attr:`benchmark.data.registry.DatasetSpec.protocol_settings`; this module stays torch-free.
DatasetSettings = Callable[[str, str], Mapping[str, Any]]


def resolve_config(
    protocol_data: Mapping[str, Any],
    budget_overrides: Mapping[str, Any],
    user_overrides: Mapping[str, Any],
    dataset_settings: DatasetSettings | None = None,
    check: Callable[[RunConfig], None] | None = None,
) -> tuple[RunConfig, RunConfig]:
    """Return ``(resolved, paper)``: protocol ∘ dataset ∘ budget ∘ user overrides, and the paper
    configuration, protocol ∘ dataset.

    The dataset layer (``dataset_settings(dataset, protocol)``, for the dataset the other layers
    choose) holds the values the papers used on that dataset, such as Cars196's MLRC schedule
    (eval every 5 epochs, patience 3): they are part of the paper configuration, so a user who
    sets them is not deviating, while a budget or user value that differs from them is.
    Each layer is validated on its own first so an error names the layer's key. ``check`` runs
    on the resolved config before the value checks every protocol shares (the protocols' own-key
    check, :func:`benchmark.protocol.registry.resolve_run_config`).
    """
    budget_nested = dotted_to_nested(budget_overrides)
    user_nested = dotted_to_nested(user_overrides)
    if dataset_settings is not None:
        chosen = config_from_mapping(_deep_merge(_deep_merge(protocol_data, budget_nested), user_nested))
        settings = dataset_settings(chosen.data.dataset, chosen.protocol.name)
        protocol_data = _deep_merge(protocol_data, dotted_to_nested(settings))
    paper = config_from_mapping(protocol_data)
    config_from_mapping(_deep_merge(protocol_data, budget_nested))
    merged = _deep_merge(_deep_merge(protocol_data, budget_nested), user_nested)
    resolved = config_from_mapping(merged)
    if check is not None:
        check(resolved)
    check_values(resolved)
    return resolved, paper


#: Largest accepted count (trials, repetitions, epochs, iterations, batch size, ...): far beyond
#: what any machine could run, so a larger value is a typo (e.g. 10**21 trials), refused before
#: any compute instead of starting a run with an ETA of 10^21 hours.
MAX_COUNT = 10**6

#: The integer settings that count work (or size a tensor), bounded by MAX_COUNT.
COUNT_KEYS = (
    "train.batch_size",
    "train.iters_per_epoch",
    "train.max_epochs",
    "train.eval_every",
    "train.patience",
    "search.n_trials",
    "search.n_startup_trials",
    "test.reps",
    "model.embedding_dim",
    "data.image_size",
    "eval.ivf_nlist",
    "eval.ivf_nprobe",
    "eval.hnsw_m",
    "eval.hnsw_ef_search",
)


def check_values(config: RunConfig) -> None:
    """Refuse values no protocol can give a meaningful result with (every protocol shares these).

    Registered names and protocol-specific ranges (e.g. counts >= 1) are checked by the runners.
    """
    t, d = config.train, config.data
    if not t.lr > 0:
        raise ConfigError(
            f"train.lr must be > 0, got {t.lr!r}: with lr = 0 the trunk and embedder never change "
            "(the run would score its initialisation), with lr < 0 they climb the loss."
        )
    if t.weight_decay < 0:
        raise ConfigError(f"train.weight_decay must be >= 0, got {t.weight_decay!r}.")
    for key, value in (("train.momentum", t.momentum), ("train.param_momentum", t.param_momentum)):
        if not 0 <= value < 1:
            raise ConfigError(f"{key} must lie in [0, 1), got {value!r}.")
    if not 0 < config.test.confidence < 1:
        raise ConfigError(f"test.confidence must lie in (0, 1), got {config.test.confidence!r}.")
    values = flatten(config_to_dict(config))
    for key in COUNT_KEYS:
        if values[key] > MAX_COUNT:
            raise ConfigError(
                f"{key} = {values[key]} is more than any machine could run (at most {MAX_COUNT:,}); "
                "check the value."
            )
    for key, value in (("data.max_classes", d.max_classes), ("data.max_per_class", d.max_per_class)):
        if value < 0:
            raise ConfigError(f"{key} must be >= 0 (0 = no limit), got {value}.")
    check_eval(config.eval)
    if d.max_per_class == 1:
        raise ConfigError(
            "data.max_per_class = 1 keeps one image per class: no query would have a positive, so "
            "retrieval metrics are undefined. Use 0 (all images) or at least 2."
        )


def check_eval(e: EvalConfig) -> None:
    """Refuse an unknown ``eval.knn``, a count below its minimum, and an index parameter set for
    an index that is not chosen (it would be recorded as a deviation that changes nothing)."""
    if e.knn not in KNN_KINDS:
        raise ConfigError(f"eval.knn must be one of {', '.join(KNN_KINDS)}, got {e.knn!r}.")
    for key, value, low in (
        ("ivf_nlist", e.ivf_nlist, 0),
        ("ivf_nprobe", e.ivf_nprobe, 1),
        ("hnsw_m", e.hnsw_m, 1),
        ("hnsw_ef_search", e.hnsw_ef_search, 1),
    ):
        if value < low:
            raise ConfigError(f"eval.{key} must be >= {low}, got {value}.")
    default = EvalConfig()
    for key in ("ivf_nlist", "ivf_nprobe", "hnsw_m", "hnsw_ef_search"):
        owner = key.split("_")[0]
        if getattr(e, key) != getattr(default, key) and e.knn != owner:
            raise ConfigError(
                f"eval.{key} = {getattr(e, key)} configures the {owner!r} index, but eval.knn is "
                f"{e.knn!r}; set eval.knn = {owner!r} too, or leave eval.{key} at its default."
            )


#: Settings added after run records and regression baselines existed, with the value that
#: reproduces the earlier computation exactly (the MLRC loop). Identities that must stay
#: comparable with stored ones (``dmlbench regress``) leave them out while they hold that value.
#: (The traditional protocol's loop options, once here too, are its own settings now: an MLRC
#: config has no such key at all, so its identity is the one stored before they existed.)
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "model.freeze_trunk_bn_affine": False,
    "model.pooling": "avg",
    "model.embedder_init": "default",
    "eval.knn": "exact",
    "eval.ivf_nlist": 0,
    "eval.ivf_nprobe": 16,
    "eval.hnsw_m": 32,
    "eval.hnsw_ef_search": 128,
    "search.log_wide_ranges": False,
}


def is_neutral(key: str, value: Any) -> bool:
    """Whether the dotted setting ``key`` is one of :data:`NEUTRAL_DEFAULTS` and holds its neutral
    value: a run record or regression identity that lacks the key computed the same thing."""
    return key in NEUTRAL_DEFAULTS and value == NEUTRAL_DEFAULTS[key]


@dataclass(frozen=True)
class Deviation:
    """One setting that differs from the protocol's paper value."""

    key: str
    paper: Any
    value: Any

    def describe(self) -> str:
        return f"{self.key} = {self.value!r} (paper: {self.paper!r})"


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1e-4}}`` -> ``{"train.lr": 1e-4}`` (``loss`` and ``space`` stay tables)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = _join(prefix, k)
        if isinstance(v, Mapping) and v and k not in ("loss", "space"):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


# Settings that say *what* is evaluated or where files live, not *how*: choosing another dataset
# or data folder is not a departure from the protocol.
NOT_DEVIATIONS = frozenset({"data.dataset", "data.data_dir", "model.trunk_weights"})


def deviations(resolved: RunConfig, paper: RunConfig) -> list[Deviation]:
    """Every leaf setting (except NOT_DEVIATIONS) whose value differs from the paper configuration."""
    a = flatten(config_to_dict(resolved))
    b = flatten(config_to_dict(paper))
    return [Deviation(k, b.get(k), a[k]) for k in sorted(a) if k not in NOT_DEVIATIONS and a[k] != b.get(k)]


def describe_schedule(
    resolved: RunConfig,
    paper: RunConfig,
    budget: str,
    budget_overrides: Mapping[str, Any],
    dataset_declared: bool,
) -> dict[str, Any]:
    """The convergence schedule a run used and where each value came from, for the run record.

    ``source`` maps eval_every and patience to ``"paper"`` (the paper's value for this dataset;
    ``paper_from`` says whether the dataset declared its own schedule or the protocol file's
    applies), ``"budget <name>"`` (set by the budget) or ``"user"`` (``--set``).
    """
    source: dict[str, str] = {}
    for key in ("eval_every", "patience"):
        value = getattr(resolved.train, key)
        if value == getattr(paper.train, key):
            source[key] = "paper"
        elif budget_overrides.get(f"train.{key}") == value:
            source[key] = f"budget {budget}"
        else:
            source[key] = "user"
    return {
        "eval_every": resolved.train.eval_every,
        "patience": resolved.train.patience,
        "max_epochs": resolved.train.max_epochs,
        "source": source,
        "paper": {"eval_every": paper.train.eval_every, "patience": paper.train.patience},
        "paper_from": (
            f"dataset {resolved.data.dataset!r} ({resolved.protocol.name} schedule)"
            if dataset_declared
            else f"protocols/{resolved.protocol.name}.toml"
        ),
    }
