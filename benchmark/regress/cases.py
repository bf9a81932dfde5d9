"""The regression suite: which (dataset, loss) cases ``dmlbench regress`` trains, and how.

The suite is declared in one TOML file (``protocols/regress.toml``) and parsed strictly here:
an unknown key, a wrong type, an unknown dataset or loss is a :class:`ConfigError` naming it,
before any compute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from benchmark.budgets import BUDGETS
from benchmark.config import PROTOCOLS_DIR, load_protocol_file
from benchmark.data import DATASETS
from benchmark.errors import ConfigError, UnknownNameError
from benchmark.losses import LOSSES

REPO_ROOT = PROTOCOLS_DIR.parent
DEFAULT_SUITE = PROTOCOLS_DIR / "regress.toml"
DEFAULT_BASELINES = REPO_ROOT / "results" / "baselines"


@dataclass(frozen=True)
class Settings:
    """What every case shares: protocol, budget, overrides, fold, seeds and the tolerance rule."""

    protocol: str
    budget: str
    fold: int
    seeds: tuple[int, ...]
    tolerance_quantile: float
    tolerance_floor: float
    overrides: Mapping[str, Any]
    n_check_seeds: int = 1

    @property
    def check_seeds(self) -> tuple[int, ...]:
        """The seeds a check (CI) trains, the first ``n_check_seeds`` of ``seeds``; --update trains all."""
        return self.seeds[: self.n_check_seeds]


@dataclass(frozen=True)
class Case:
    """One regression case: a loss with its default hyperparameters on a dataset subset."""

    dataset: str
    loss: str
    data_dir: Path | None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """The dataset's config overrides, applied over the suite's ``[regress.set]``."""

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.loss}"


@dataclass(frozen=True)
class Suite:
    settings: Settings
    cases: tuple[Case, ...]
    path: Path

    def names(self) -> list[str]:
        return [c.name for c in self.cases]


_SETTINGS_KEYS = {
    "protocol": str,
    "budget": str,
    "fold": int,
    "seeds": list,
    "check_seeds": int,
    "tolerance_quantile": float,
    "tolerance_floor": float,
    "set": dict,
}
_KIND = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
_DATASET_KEYS = {"losses": list, "data_dir": str, "set": dict}


def _check_table(table: Mapping[str, Any], allowed: Mapping[str, type], where: str, path: Path) -> None:
    """Unknown keys and wrong types are errors naming the key (ints are accepted as floats)."""
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(
                f"{path}: unknown key {where}.{key}; valid keys there: {', '.join(sorted(allowed))}."
            )
        want = allowed[key]
        ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ConfigError(f"{path}: {where}.{key} must be {_KIND[want]}, got {value!r}.")


def _require(table: Mapping[str, Any], key: str, where: str, path: Path) -> Any:
    if key not in table:
        raise ConfigError(f"{path}: missing key {where}.{key}.")
    return table[key]


def parse_suite(data: Mapping[str, Any], path: Path, data_dir_override: Path | None = None) -> Suite:
    """Validate a parsed suite file. ``data_dir_override`` (``--data-dir``) replaces the data folder
    of every dataset that reads files from disk; relative ``data_dir`` values are resolved against
    the repository root."""
    unknown = sorted(set(data) - {"regress", "datasets"})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level table(s) {unknown}; valid: regress, datasets.")
    reg = _require(data, "regress", "", path)
    _check_table(reg, _SETTINGS_KEYS, "regress", path)
    protocol = str(_require(reg, "protocol", "regress", path))
    load_protocol_file(protocol)  # unknown protocol -> error listing the valid ones
    budget = str(_require(reg, "budget", "regress", path))
    BUDGETS.get(budget)
    seeds = tuple(_require(reg, "seeds", "regress", path))
    if len(seeds) < 2 or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"{path}: regress.seeds must list at least 2 integer seeds, got {list(seeds)}.")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{path}: regress.seeds has duplicates: {list(seeds)}.")
    quantile = float(_require(reg, "tolerance_quantile", "regress", path))
    if not 0.5 < quantile < 1:
        raise ConfigError(f"{path}: regress.tolerance_quantile must be in (0.5, 1), got {quantile}.")
    floor = float(_require(reg, "tolerance_floor", "regress", path))
    if floor < 0:
        raise ConfigError(f"{path}: regress.tolerance_floor must be >= 0, got {floor}.")
    fold = int(_require(reg, "fold", "regress", path))
    if not 0 <= fold < 4:
        raise ConfigError(f"{path}: regress.fold must be 0..3 (MLRC has 4 folds), got {fold}.")
    n_check = int(_require(reg, "check_seeds", "regress", path))
    if not 1 <= n_check < len(seeds):
        raise ConfigError(
            f"{path}: regress.check_seeds must be in 1..{len(seeds) - 1} (fewer than the {len(seeds)} "
            f"baseline seeds), got {n_check}."
        )
    settings = Settings(protocol, budget, fold, seeds, quantile, floor, dict(reg.get("set", {})), n_check)

    datasets = _require(data, "datasets", "", path)
    if not isinstance(datasets, Mapping) or not datasets:
        raise ConfigError(f"{path}: [datasets.NAME] tables are required (at least one).")
    cases: list[Case] = []
    for ds_name, table in datasets.items():
        DATASETS.get(ds_name)
        if not isinstance(table, Mapping):
            raise ConfigError(f"{path}: datasets.{ds_name} must be a table.")
        _check_table(table, _DATASET_KEYS, f"datasets.{ds_name}", path)
        losses = _require(table, "losses", f"datasets.{ds_name}", path)
        if not losses:
            raise ConfigError(f"{path}: datasets.{ds_name}.losses is empty.")
        data_dir: Path | None = None
        if DATASETS.get(ds_name).requires_data_dir:
            if data_dir_override is not None:
                data_dir = data_dir_override.resolve()
            elif "data_dir" in table:
                data_dir = (REPO_ROOT / str(table["data_dir"])).resolve()
        elif "data_dir" in table:
            raise ConfigError(f"{path}: datasets.{ds_name}.data_dir is set but {ds_name!r} reads no files.")
        for loss in losses:
            if not isinstance(loss, str):
                raise ConfigError(f"{path}: datasets.{ds_name}.losses must be loss names, got {loss!r}.")
            LOSSES.get(loss)
            if any(c.dataset == ds_name and c.loss == loss for c in cases):
                raise ConfigError(f"{path}: case {ds_name}/{loss} is listed twice.")
            cases.append(Case(ds_name, loss, data_dir, dict(table.get("set", {}))))
    return Suite(settings, tuple(cases), path)


def load_suite(path: Path = DEFAULT_SUITE, data_dir_override: Path | None = None) -> Suite:
    """Read and validate a suite file."""
    if not path.is_file():
        raise ConfigError(f"Regression suite file {path} does not exist.")
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Regression suite file {path} is not valid TOML: {exc}") from exc
    return parse_suite(data, path, data_dir_override)


def select_cases(
    suite: Suite,
    names: Sequence[str] | None = None,
    datasets: Sequence[str] | None = None,
    losses: Sequence[str] | None = None,
) -> list[Case]:
    """The suite's cases filtered by case name, dataset and loss (each None = no filter).

    A filter value that matches no case is an error listing the valid values.
    """
    cases = list(suite.cases)
    for value in names or []:
        if value not in suite.names():
            raise UnknownNameError("regression case", value, suite.names())
    for value in datasets or []:
        valid = sorted({c.dataset for c in cases})
        if value not in valid:
            raise UnknownNameError("regression dataset", value, valid)
    for value in losses or []:
        valid = sorted({c.loss for c in cases})
        if value not in valid:
            raise UnknownNameError("regression loss", value, valid)
    selected = [
        c
        for c in cases
        if (not names or c.name in names)
        and (not datasets or c.dataset in datasets)
        and (not losses or c.loss in losses)
    ]
    if not selected:
        raise ConfigError(
            "The filters select no case (they exclude each other). Cases: " + ", ".join(suite.names()) + "."
        )
    return selected
