"""What a run is asked to do, and every check of it that needs neither data nor torch.

``dmlbench run`` calls :func:`preflight` right after parsing its arguments, before importing the
runners (torch, Optuna, faiss): a mistyped name or value is refused in a fraction of a second.
Only a given weights file's contents need torch (:func:`check_weights_contents`); preflight checks
them last, still before any data is read. The runners call the same functions again in their
``resolve`` step (for callers of the Python API), followed by the checks that need torch or the data.
A protocol's own torch-free checks are the ``check_config`` of its declaration
(:class:`~benchmark.protocol.registry.ProtocolSpec`), which both preflight and ``resolve`` call.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file
from benchmark.data import DATASETS
from benchmark.data.registry import check_image_size
from benchmark.errors import ConfigError, DataError
from benchmark.losses import LOSSES
from benchmark.metrics import METRICS
from benchmark.models.pretrained import is_builtin, weights_record
from benchmark.models.registry import trunk_spec
from benchmark.models.weights_format import check_weights_format
from benchmark.option_checks import validate_training_options
from benchmark.protocol.extend_search import check_source
from benchmark.protocol.registry import file_protocol_spec, protocol_spec, resolve_run_config
from benchmark.protocol.space import search_space
from benchmark.search.options import DEFAULT_HEARTBEAT_S, SAMPLERS, redact_url


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for on the command line."""

    loss: str
    protocol: str = "mlrc"
    dataset: str | None = None
    data_dir: str | None = None
    budget: str = "mini"
    seed: int = 0
    sampler: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    out: Path = Path("runs")
    results_dir: Path = Path("results")
    device: str = "auto"
    jobs: int = 0  # fold-parallel worker processes; 0 = one per CPU core (1 on GPU)
    quiet: bool = False
    storage: str | None = None  # database URL shared by several processes; None = the run dir's journal
    workers: int = 1  # local search processes sharing the study
    worker_id: int | None = None  # set in a process started by --workers: it only runs search trials
    heartbeat: int = DEFAULT_HEARTBEAT_S  # seconds between heartbeats of a running trial (database)
    resume_mixed_code: bool = False  # resume a run directory that other code worked in
    extend_search: Path | None = None  # a run dir or record whose search (fewer trials) seeds this run's


#: ``--device`` values: ``auto`` (CUDA if present), ``cpu``, ``cuda`` / ``cuda:N``, ``mps``.
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")

#: ``data.augment`` values (the runner maps each to its augmentation).
AUGMENT_NAMES = ("paper", "imagenet", "characters", "none")

#: Counts every protocol needs >= 1 (the MLRC runner adds its search and iteration counts).
COMMON_POSITIVE = (
    "train.batch_size",
    "train.max_epochs",
    "train.eval_every",
    "train.patience",
    "test.reps",
    "model.embedding_dim",
    "data.image_size",
)


def check_request(req: RunRequest) -> None:
    """Refuse command-line values that no run can use (before anything is read or computed)."""
    if req.seed < 0:
        raise ConfigError(f"--seed must be >= 0 (seeds are non-negative integers), got {req.seed}.")
    if req.jobs < 0:
        raise ConfigError(
            f"--jobs must be >= 1, or 0 for one per CPU core (max 4; 1 on GPU); got {req.jobs}."
        )
    if req.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {req.workers}.")
    if req.heartbeat < 1:
        raise ConfigError(f"--heartbeat must be >= 1 second, got {req.heartbeat}.")
    if not DEVICE_PATTERN.fullmatch(req.device):
        raise ConfigError(
            f"Unknown --device {req.device!r}; valid: auto, cpu, cuda, cuda:N (e.g. cuda:0), mps."
        )
    for flag, folder in (("--out", req.out), ("--results-dir", req.results_dir)):
        check_writable_dir(folder, flag)
    if req.extend_search is not None:
        if req.storage is not None:
            raise ConfigError(
                "--extend-search seeds the run directory's journal; it cannot be combined with "
                f"--storage (got {redact_url(req.storage)}). Leave one of them out."
            )
        check_source(req.extend_search)


def check_writable_dir(folder: Path, flag: str) -> None:
    """Refuse ``folder`` unless it is, or can be created as, a directory this process can write in.

    Checked at start: a run writes its run directory first and its record last, and a read-only
    results folder found only after training would waste the whole run.
    """
    path = folder.expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {folder}: {existing} exists and is not a directory.")
    try:
        # A real write, not os.access: read-only mounts, ACLs and root all answer the same way here.
        with tempfile.TemporaryFile(dir=existing, prefix=".dmlbench-write-check-"):
            pass
    except OSError as exc:
        what = "is not writable" if existing == path else f"cannot be created: {existing} is not writable"
        raise ConfigError(
            f"{flag} {folder} {what} ({exc.strerror or exc}). Choose a writable folder."
        ) from exc


def request_layers(req: RunRequest) -> tuple[dict[str, Any], Mapping[str, Any], dict[str, Any]]:
    """``(protocol file, budget overrides, user overrides)`` of a request (see ``resolve_config``)."""
    BUDGETS.get(req.budget)  # an unknown budget is named before the protocol file is read
    user: dict[str, Any] = dict(req.overrides)
    if req.dataset is not None:
        user["data.dataset"] = req.dataset
    if req.data_dir is not None:
        user["data.data_dir"] = str(Path(req.data_dir).resolve())
    if req.sampler is not None:
        user["search.sampler"] = req.sampler
    protocol_data = load_protocol_file(req.protocol)
    # The file's kind, looked up by file: an unknown kind is an error naming this file.
    budget = file_protocol_spec(req.protocol).overrides_for(req.budget, BUDGETS.get(req.budget).overrides)
    return protocol_data, budget, user


def dataset_paper_settings(dataset: str, protocol: str) -> Mapping[str, Any]:
    """The registered dataset's paper settings under ``protocol`` (DatasetSpec.protocol_settings)."""
    return DATASETS.get(dataset).settings_for(protocol)


def validate_common(c: RunConfig, positive: Mapping[str, int]) -> None:
    """Checks every protocol shares: :func:`check_common`, then those that need torch (pretrained
    weights looked up in torch's cache, a weights file's contents)."""
    check_common(c, positive)
    if c.model.pretrained and not c.model.trunk_weights:
        from benchmark.models.trunks import lookup_cached_weights  # reads torch's hub directory

        searched = lookup_cached_weights(trunk_spec(c.model.trunk)).searched
        where = "".join(f" and {place}" for place in searched)
        raise ConfigError(
            f"model.pretrained = true for trunk {c.model.trunk!r} but no weights file was given{where}; "
            "weights are never downloaded. Pass --trunk-weights PATH (or --set model.pretrained=false)."
        )
    check_weights_contents(c)


def check_common(c: RunConfig, positive: Mapping[str, int]) -> None:
    """The torch-free checks every protocol shares: registered names, augmentation, option values,
    counts ``positive`` >= 1, reps >= 2, and a weights file's name, checksum or first bytes."""
    check_counts(c, positive)
    check_image_size(c.data.image_size)
    DATASETS.get(c.data.dataset)
    trunk_spec(c.model.trunk)
    SAMPLERS.get(c.search.sampler)
    for m in c.test.metrics:
        METRICS.get(m)
    if c.data.augment not in AUGMENT_NAMES:
        raise ConfigError(f"Unknown data.augment {c.data.augment!r}; valid: {', '.join(AUGMENT_NAMES)}.")
    if c.model.frozen_trunk and c.data.augment != "none":
        # Features are cached once per image, so they are of un-augmented images; asking for the
        # user's explicit data.augment=none records that loss of augmentation as a deviation too.
        raise ConfigError(
            f"model.frozen_trunk = true trains on cached features of un-augmented images, but "
            f"data.augment = {c.data.augment!r}; add --set data.augment=none."
        )
    validate_training_options(c)
    if c.model.trunk_weights and not c.model.pretrained:
        # Which one wins is not obvious (weights ignored, or pretrained switched on?): refused.
        raise ConfigError(
            f"--trunk-weights / model.trunk_weights = {c.model.trunk_weights!r} was given but "
            "model.pretrained = false (the cpu budgets train from scratch). To start from those weights "
            "add --set model.pretrained=true; to train from scratch, leave out --trunk-weights."
        )
    if is_builtin(c.model.trunk_weights):
        # Checks the name, the trunk it belongs to and the file's sha256 before any compute.
        weights_record(c.model.trunk, True, c.model.trunk_weights)
    elif c.model.trunk_weights:
        check_weights_format(Path(c.model.trunk_weights).expanduser())


def check_weights_contents(c: RunConfig) -> None:
    """A ``model.trunk_weights`` file (not a built-in one) holds a state dict that fits the trunk.

    This needs torch (only unpickling tells a state dict from another pickled object, and the
    trunk's keys come from building it), so it comes after every torch-free check; it is still made
    before any data is read.
    """
    if not c.model.trunk_weights or is_builtin(c.model.trunk_weights):
        return
    from benchmark.models.trunks import check_weights_file  # torch reads the file

    check_weights_file(Path(c.model.trunk_weights).expanduser(), c.model.trunk)


def check_data_dir(c: RunConfig) -> None:
    """A dataset that reads files needs a data directory, laid out as its ``check_data_dir`` declares
    (torch-free, so the mistake is reported before seconds of imports). The files' contents are
    checked by the dataset's loader."""
    spec = DATASETS.get(c.data.dataset)
    if spec.requires_data_dir and not c.data.data_dir:
        raise DataError(
            f"Dataset {c.data.dataset!r} reads files from disk: pass its folder with --data-dir PATH "
            "(or --set data.data_dir=PATH)."
        )
    if c.data.data_dir and spec.check_data_dir is not None:
        if not callable(spec.check_data_dir):  # a plugin's DatasetSpec: a TypeError traceback otherwise
            raise ConfigError(
                f"Dataset {c.data.dataset!r}: DatasetSpec.check_data_dir must be None or callable "
                f"(data_dir -> None), got {spec.check_data_dir!r}."
            )
        spec.check_data_dir(Path(c.data.data_dir))


def check_counts(c: RunConfig, positive: Mapping[str, int]) -> None:
    """Counts ``positive`` >= 1 and test.reps >= 2 (torch-free)."""
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}.")
    if c.test.reps < 2:
        raise ConfigError(f"test.reps must be >= 2 to give a confidence interval, got {c.test.reps}.")


def positive_counts(c: RunConfig, keys: tuple[str, ...]) -> dict[str, int]:
    """``{key: value}`` of the dotted integer settings ``keys`` (for :func:`validate_common`)."""
    out = {}
    for key in keys:
        section, name = key.split(".")
        out[key] = int(getattr(getattr(c, section), name))
    return out


def preflight(req: RunRequest) -> RunConfig:
    """Every check of ``req`` that needs neither torch nor the data, then a weights file's contents
    (torch; before any data is read); returns the resolved config.

    The protocol's own checks are its declaration's ``check_config``
    (:meth:`~benchmark.protocol.registry.ProtocolSpec.check`), made before the common ones as the
    runner's ``resolve`` makes them. Pretrained weights asked for without a file are looked up in
    the runner (in torch's cache), so that case is left to the runner's ``resolve``.
    """
    check_request(req)
    LOSSES.get(req.loss)
    config, _ = resolve_run_config(*request_layers(req), dataset_paper_settings)
    check_data_dir(config)
    protocol_spec(config.protocol.name).check(config, req)
    check_common(config, positive_counts(config, COMMON_POSITIVE))
    search_space(config, req.loss)  # loss.X and space.X overrides, as the runner resolves them
    check_weights_contents(config)
    return config
