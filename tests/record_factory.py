"""Synthetic run records for tests: plain dict documents of the record schema
(:class:`benchmark.records.RunRecordDoc`), each section present only where a test gives it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.stats.intervals import t_interval

MODES = ("separated", "concatenated")
MLRC = ["map_at_r", "precision_at_1", "r_precision"]
OFFSETS = (-0.01, 0.0, 0.01)  # per-rep spread: 95% half-width 2.48 points for 3 reps
COMMIT = "0123456789abcdef"
SCHEMA = "dmlbench.run/1"  # the schema version these records are of

#: ``test.per_rep`` / ``test.summary``: mode -> metric -> per-rep values / interval.
PerRep = dict[str, dict[str, list[float]]]
Summary = dict[str, dict[str, dict[str, Any]]]


def spread(base: Mapping[str, float], concat_gain: float = 0.0) -> PerRep:
    """Per-rep values ``base[metric] + OFFSETS`` of each metric in both modes, ``concat_gain``
    higher concatenated (in ``base``'s metric order)."""
    return {
        mode: {
            m: [b + (concat_gain if mode == "concatenated" else 0.0) + o for o in OFFSETS]
            for m, b in base.items()
        }
        for mode in MODES
    }


def searched(complete: int, failed: int = 0) -> dict[str, Any]:
    """A ``search`` section of ``complete`` complete then ``failed`` failed trials (states only)."""
    return {
        "n_trials": complete + failed,
        "trials": [{"state": "COMPLETE"}] * complete + [{"state": "FAIL"}] * failed,
    }


def run_record(
    loss: str,
    created: str,
    *,
    per_rep: PerRep | None = None,
    summary: Summary | None = None,
    reps: int = 3,
    rep_details: list[dict[str, Any]] | None = None,
    display: str | None = None,
    budget: str = "mini",
    seed: int | None = 0,
    schema: str | None = None,
    kind: str | None = None,
    config: dict[str, Any] | None = None,
    trunk_weights: dict[str, Any] | None = None,
    commit: str | None = COMMIT,
    deviations: list[dict[str, Any]] | None = None,
    search: dict[str, Any] | None = None,
    untrained: float | None = 0.05,
    timings_s: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A run record of ``loss`` holding the sections given, in a written record's key order; a
    section given as None is left out (the records of older or smaller shapes some tests need).

    ``test.summary`` unless given: the t intervals of ``per_rep``, as a run writes them;
    ``test.metrics``: the metrics of ``per_rep`` (else of ``summary``); ``environment``: a clean
    checkout at ``commit``; ``untrained``: that value for every mode and metric."""
    if summary is None and per_rep is not None:
        summary = {mode: {m: vars(t_interval(v)) for m, v in vals.items()} for mode, vals in per_rep.items()}
    metrics = list((per_rep or summary or {}).get("separated", {}))
    return _present(
        schema=schema,
        kind=kind,
        loss=loss,
        loss_display_name=display,
        budget=budget,
        seed=seed,
        created=created,
        config=config,
        trunk_weights=trunk_weights,
        environment=None if commit is None else {"git": {"commit": commit, "dirty": False}},
        deviations=deviations,
        search=search,
        test=_present(reps=reps, metrics=metrics, per_rep=per_rep, summary=summary, rep_details=rep_details),
        untrained=None if untrained is None else {mode: dict.fromkeys(metrics, untrained) for mode in MODES},
        timings_s=timings_s,
    )


def _present(**sections: Any) -> dict[str, Any]:
    """``sections`` in their order, less those given as None."""
    return {k: v for k, v in sections.items() if v is not None}
