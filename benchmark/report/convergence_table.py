"""The convergence table of a leaderboard (``dmlbench report --convergence``): per budget and loss,
the share of fold trainings that stopped by patience (search and test stage), the verdict, how many
epochs the folds ran (median best epoch, total epochs), their median wall time and the record's
training time, with the CPU kind and commit that produced the numbers (docs/protocols.md §2.6).

It reads the chosen record per loss, as the leaderboard rows do; the shares are the leaderboard
footer's (:func:`benchmark.analysis.convergence.convergence_summary`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from typing import Any

from benchmark.analysis.convergence import stage_fold_stats
from benchmark.errors import ConfigError
from benchmark.records import RunRecord
from benchmark.report.leaderboard import Leaderboard, format_share

#: The formats ``dmlbench report --convergence`` writes.
CONVERGENCE_FORMATS = ("md", "csv")

_CSV_FIELDS = (
    "budget",
    "loss",
    "verdict",
    "search_patience_stops",
    "search_fold_trainings",
    "test_patience_stops",
    "test_fold_trainings",
    "search_median_best_epoch",
    "test_median_best_epoch",
    "search_median_fold_wall_s",
    "test_median_fold_wall_s",
    "fold_epochs",
    "training_wall_s",
    "invocations_without_timings",
    "search_extended",
    "cpu_capability",
    "commit",
)


def _cpu(record: RunRecord) -> str:
    env = record.document.get("environment", {})
    capability = env.get("cpu_capability") if isinstance(env, Mapping) else None
    return str(capability) if capability else "–"


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None or math.isnan(value) else format(value, fmt)


def _wall(values: Mapping[str, Any]) -> str:
    """The training wall time, ``≥``-prefixed when invocations without timings make it a lower bound,
    ``+``-prefixed when it covers only an extended search's extra trials and the test stage."""
    text = _num(values["training_wall_s"], ".0f")
    if text == "–":
        return text
    if values["search_extended"]:
        text = f"+ {text}"
    return f"≥ {text}" if values["invocations_without_timings"] else text


def convergence_values(record: RunRecord) -> dict[str, Any]:
    """One record's row of the table, as plain values (None where the record has no such value)."""
    summary, stats = record.convergence, stage_fold_stats(record.document)
    return {
        "loss": record.loss,
        "verdict": summary["verdict"],
        "search": summary["search"],
        "test": summary["test"],
        "search_median_best_epoch": stats["search"]["median_best_epoch"],
        "test_median_best_epoch": stats["test"]["median_best_epoch"],
        "search_median_fold_wall_s": stats["search"]["median_wall_s"],
        "test_median_fold_wall_s": stats["test"]["median_wall_s"],
        "fold_epochs": stats["search"]["epochs"] + stats["test"]["epochs"],
        "training_wall_s": record.training_wall_s(),
        "invocations_without_timings": record.invocations_without_timings,
        "search_extended": record.search_extended,
        "cpu_capability": _cpu(record),
        "commit": record.commit,
    }


def convergence_markdown(lb: Leaderboard) -> str:
    """The convergence table in Markdown, one section per budget."""
    lines = [
        f"# Convergence: `{lb.dataset}`, protocol `{lb.protocol}`",
        "",
        "Fold trainings stopped by patience (search, test), the run's verdict, the median best epoch "
        "and median wall time of the fold trainings (search / test), all fold epochs, and the "
        "record's training time (search + test); `*`: stops derived for an older record; `≥`: a "
        "lower bound, some invocations of the run ended without saving their timings (SIGKILL); `+`: "
        "the extra trials and the test stage only, the search having started from an earlier "
        "run's trials (`--extend-search`).",
    ]
    for section in lb.sections:
        lines += [
            "",
            f"## Budget `{section.label}`",
            "",
            "| Loss | Search by patience | Test by patience | Verdict | Median best epoch (search / test) "
            "| Median fold wall s (search / test) | Fold epochs | Training wall (s) | CPU | Commit |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for record in section.chosen:
            v = convergence_values(record)
            best = f"{_num(v['search_median_best_epoch'], 'g')} / {_num(v['test_median_best_epoch'], 'g')}"
            wall = (
                f"{_num(v['search_median_fold_wall_s'], '.1f')} / {_num(v['test_median_fold_wall_s'], '.1f')}"
            )
            lines.append(
                f"| {record.loss} | {format_share(v['search'])} | {format_share(v['test'])} | "
                f"{v['verdict']} | {best} | {wall} | {v['fold_epochs']} | "
                f"{_wall(v)} | {v['cpu_capability']} | {v['commit']} |"
            )
    return "\n".join(lines) + "\n"


def convergence_csv(lb: Leaderboard) -> str:
    """The convergence table as CSV, one row per budget and loss."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for section in lb.sections:
        for record in section.chosen:
            v = convergence_values(record)
            row = {k: v[k] for k in _CSV_FIELDS if k in v}
            for stage in ("search", "test"):
                row[f"{stage}_patience_stops"] = v[stage]["patience"]
                row[f"{stage}_fold_trainings"] = v[stage]["n"]
            writer.writerow({"budget": section.label, **{k: "" if x is None else x for k, x in row.items()}})
    return out.getvalue()


def render_convergence(fmt: str, lb: Leaderboard) -> str:
    """The convergence table of ``lb`` in ``fmt`` (one of :data:`CONVERGENCE_FORMATS`)."""
    if fmt == "md":
        return convergence_markdown(lb)
    if fmt == "csv":
        return convergence_csv(lb)
    raise ConfigError(f"Unknown convergence table format {fmt!r}; valid: {', '.join(CONVERGENCE_FORMATS)}.")
