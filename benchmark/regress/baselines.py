"""Baseline files of ``dmlbench regress``: ``results/baselines/<dataset>.json``.

One file per dataset, one entry per loss. An entry holds the metric values of every baseline seed,
the value a check compares against (the check seed's), the tolerance and how it was derived, the
configuration identity that must match for a comparison to mean anything, and the provenance
(command, commit, environment). Files are only ever written by ``dmlbench regress --update``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats

from benchmark.errors import DmlbenchError
from benchmark.io import read_json, write_json_atomic
from benchmark.regress.compare import tolerance_from_seeds

SCHEMA = "dmlbench.regress-baseline/2"

TOLERANCE_RULE = (
    "Same seeds, same environment, 1 torch thread on CPU: a check reproduces the baseline value bit "
    "for bit, so any delta comes from a code, data or library change. A check trains the k check seeds "
    "and compares their mean with the baseline's mean over the same k seeds. The tolerance is the "
    "allowed drop: max(floor, t_{n-1}(quantile) * sqrt(2/k) * s), s = sample standard deviation of the "
    "metric over the n baseline seeds. A change no worse than re-drawing the seeds stays within it with "
    "probability `quantile` (one-sided); a drop beyond it is a regression (exit 1), a rise beyond it is "
    "reported as IMPROVED (exit 0, re-run --update)."
)


@dataclass(frozen=True)
class MetricBaseline:
    value: float  # the mean over the check seeds, what a check compares against
    per_seed: dict[int, float]
    tolerance: float

    def to_dict(self) -> dict[str, Any]:
        values = list(self.per_seed.values())
        return {
            "value": self.value,
            "tolerance": self.tolerance,
            "mean": float(np.mean(values)),
            "sd": float(np.std(values, ddof=1)),
            "per_seed": {str(k): v for k, v in self.per_seed.items()},
        }


@dataclass(frozen=True)
class CaseBaseline:
    """The stored baseline of one regression case."""

    case: str
    check_seeds: tuple[int, ...]
    metrics: dict[str, MetricBaseline]
    identity: dict[str, Any]
    data_fingerprint: str
    tolerance: dict[str, Any]
    provenance: dict[str, Any]
    wall_s: dict[int, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "check_seeds": list(self.check_seeds),
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
            "tolerance": self.tolerance,
            "data_fingerprint": self.data_fingerprint,
            "wall_s_per_seed": {str(k): round(v, 3) for k, v in self.wall_s.items()},
            "provenance": self.provenance,
            "identity": self.identity,
        }

    def provenance_line(self) -> str:
        """One line saying where the baseline came from (commit, torch, date)."""
        p = self.provenance
        git = p.get("git", {})
        commit = str(git.get("commit", "unknown"))[:10] + (" (dirty tree)" if git.get("dirty") else "")
        torch_v = p.get("environment", {}).get("packages", {}).get("torch", "?")
        return f"commit {commit}, torch {torch_v}, created {p.get('created', '?')}"


def build_case_baseline(
    case: str,
    per_seed: Mapping[int, Mapping[str, float]],
    check_seeds: Sequence[int],
    quantile: float,
    floor: float,
    identity: dict[str, Any],
    data_fingerprint: str,
    provenance: dict[str, Any],
    wall_s: Mapping[int, float],
) -> CaseBaseline:
    """A case's baseline from its per-seed metric values (tolerances from their spread)."""
    missing = [s for s in check_seeds if s not in per_seed]
    if not check_seeds or missing:
        raise DmlbenchError(
            f"{case}: the check seeds {list(check_seeds)} must be among the seeds {list(per_seed)}."
        )
    names = list(per_seed[check_seeds[0]])
    n, k = len(per_seed), len(check_seeds)
    metrics = {}
    for name in names:
        values = {s: float(v[name]) for s, v in per_seed.items()}
        tol = tolerance_from_seeds(list(values.values()), quantile, floor, k)
        metrics[name] = MetricBaseline(check_mean(values[s] for s in check_seeds), values, tol)
    rule = {
        "formula": "max(floor, t_{n-1}(quantile) * sqrt(2/k) * sd)",
        "quantile": quantile,
        "floor": floor,
        "n_seeds": n,
        "k_check_seeds": k,
        "t": float(scipy.stats.t.ppf(quantile, n - 1)),
        "reasoning": TOLERANCE_RULE,
    }
    return CaseBaseline(
        case, tuple(check_seeds), metrics, identity, data_fingerprint, rule, provenance, dict(wall_s)
    )


def check_mean(values: Iterable[float]) -> float:
    """The value a check compares: the plain mean over the check seeds, summed in seed order (so a
    check and its baseline compute it with the same float operations)."""
    xs = list(values)
    return float(math.fsum(xs) / len(xs))


def baseline_path(directory: Path, dataset: str) -> Path:
    return directory / f"{dataset}.json"


def _get(d: Mapping[str, Any], key: str, where: str, path: Path) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise DmlbenchError(
            f"Baseline file {path} is malformed: missing {where}{key}. Re-create it with --update."
        )
    return d[key]


def _number(x: Any, where: str, path: Path) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        raise DmlbenchError(f"Baseline file {path} is malformed: {where} must be a finite number, got {x!r}.")
    return float(x)


def case_from_dict(data: Mapping[str, Any], path: Path, loss: str) -> CaseBaseline:
    """Parse one stored case, naming the missing or malformed key on error."""
    where = f"cases.{loss}."
    metrics = {}
    for name, m in _get(data, "metrics", where, path).items():
        w = f"{where}metrics.{name}."
        per_seed = {
            int(k): _number(v, f"{w}per_seed.{k}", path) for k, v in _get(m, "per_seed", w, path).items()
        }
        metrics[name] = MetricBaseline(
            _number(_get(m, "value", w, path), f"{w}value", path),
            per_seed,
            _number(_get(m, "tolerance", w, path), f"{w}tolerance", path),
        )
    wall = {int(k): float(v) for k, v in data.get("wall_s_per_seed", {}).items()}
    return CaseBaseline(
        str(_get(data, "case", where, path)),
        tuple(int(s) for s in _get(data, "check_seeds", where, path)),
        metrics,
        dict(_get(data, "identity", where, path)),
        str(_get(data, "data_fingerprint", where, path)),
        dict(_get(data, "tolerance", where, path)),
        dict(data.get("provenance", {})),
        wall,
    )


def _schema_of(path: Path) -> str | None:
    # None for a missing or unreadable file (load_baselines then reports what is wrong with it).
    try:
        schema = read_json(path).get("schema")
    except (OSError, ValueError, AttributeError):
        return None
    return str(schema)


def load_baselines(directory: Path, dataset: str) -> dict[str, CaseBaseline]:
    """The stored cases of ``dataset`` by loss name ({} when the file does not exist)."""
    path = baseline_path(directory, dataset)
    if not path.exists():
        return {}
    try:
        data = read_json(path)
    except ValueError as exc:
        raise DmlbenchError(
            f"Baseline file {path} is not valid JSON ({exc}). Re-create it with --update."
        ) from exc
    if _get(data, "schema", "", path) != SCHEMA:
        raise DmlbenchError(f"Baseline file {path} has schema {data['schema']!r}, expected {SCHEMA!r}.")
    return {loss: case_from_dict(c, path, loss) for loss, c in _get(data, "cases", "", path).items()}


def save_baselines(directory: Path, dataset: str, updated: Mapping[str, CaseBaseline]) -> Path:
    """Write ``updated`` cases into the dataset's file, keeping the cases not updated.

    A file of an older schema is replaced, not merged: its cases follow another tolerance rule,
    and a check would refuse them anyway.
    """
    path = baseline_path(directory, dataset)
    cases = load_baselines(directory, dataset) if _schema_of(path) in (None, SCHEMA) else {}
    cases.update(updated)
    write_json_atomic(
        path,
        {
            "schema": SCHEMA,
            "dataset": dataset,
            "generated_by": "dmlbench regress --update (never edit by hand)",
            "tolerance_rule": TOLERANCE_RULE,
            "cases": {loss: cases[loss].to_dict() for loss in sorted(cases)},
        },
    )
    return path
