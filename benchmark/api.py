"""The Python API: what ``dmlbench run`` and ``dmlbench report`` do, as functions for notebooks.

::

    from benchmark.api import report, run

    result = run("my_loss.py:MyLoss", budget="smoke")  # or a registered name: run("contrastive")
    result.record["test"]["summary"]["concatenated"]["map_at_r"]  # {"mean": ..., "half_width": ...}
    print(report(dataset="glyphs"))  # the leaderboard as Markdown

``dmlbench run`` calls :func:`run`; the record it returns is the one written to
``<results_dir>/<dataset>/<protocol>/records/``. Errors a user can act on raise
:class:`~benchmark.errors.DmlbenchError` (the command line prints them and exits with status 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.checks import (
    check_bool,
    check_int,
    check_metrics,
    check_name,
    check_optional_path,
    check_optional_str,
    check_overrides,
    check_path,
    check_str,
)
from benchmark.errors import ConfigError

if TYPE_CHECKING:
    from benchmark.protocol.base import RunResult
    from benchmark.protocol.progress import Progress

__all__ = ["report", "run"]


def run(
    loss: str,
    *,
    protocol: str = "mlrc",
    protocol_file: str | Path | None = None,
    dataset: str | None = None,
    data_dir: str | Path | None = None,
    budget: str = "mini",
    seed: int = 0,
    sampler: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    out: str | Path = "runs",
    results_dir: str | Path = "results",
    device: str = "auto",
    jobs: int = 0,
    quiet: bool = True,
    storage: str | None = None,
    workers: int = 1,
    heartbeat: int | None = None,
    resume_mixed_code: bool = False,
    extend_search: str | Path | None = None,
) -> RunResult:
    """Run ``protocol`` for ``loss`` (resuming finished work) and refresh the leaderboard.

    ``loss`` is a registered name (``dmlbench list losses``) or a plugin reference
    ``MODULE:NAME`` / ``PATH.py:NAME`` (:mod:`benchmark.plugins`); ``dataset`` likewise.
    ``overrides`` are ``--set`` keys (``{"train.lr": 1e-4, "loss.margin": 0.1}``). The other
    arguments are those of ``dmlbench run`` (see ``dmlbench run --help``), except ``quiet``,
    True by default here (no progress display). Returns the record (``.record``, a dict) and
    where the record, run directory and leaderboard files are.

    Every argument is checked before anything is imported or read: a wrong type (``seed="0"``,
    ``seed=True``, ``overrides=[("train.lr", 1e-4)]``) or value is a
    :class:`~benchmark.errors.ConfigError` naming the ``dmlbench run`` option, as the command line
    words it; ``protocol`` is a name (:data:`benchmark.checks.SAFE_NAME`), never a path: a
    protocol file elsewhere is ``protocol_file`` (with ``protocol`` left at its default; the file
    name is then the protocol's name, :func:`benchmark.config.add_protocol_file`).
    """
    from benchmark import plugins
    from benchmark.config import add_protocol_file
    from benchmark.protocol.request import RunRequest, preflight
    from benchmark.search.options import DEFAULT_HEARTBEAT_S, check_storage_url

    # Types first (a notebook passes anything): each a ConfigError naming the --flag, as the CLI does.
    loss = check_str("--loss", loss)
    protocol = check_name("protocol", protocol)
    protocol_path = check_optional_path("--protocol-file", protocol_file)
    if protocol_path is not None and protocol != "mlrc":  # "mlrc": the default, left as it is
        raise ConfigError("Give either --protocol or --protocol-file, not both.")
    dataset = check_optional_str("--dataset", dataset)
    data_path = check_optional_path("--data-dir", data_dir)
    budget = check_str("--budget", budget)
    seed = check_int("--seed", seed)
    sampler = check_optional_str("--sampler", sampler)
    user_overrides = check_overrides(overrides)
    out_path = check_path("--out", out)
    results_path = check_path("--results-dir", results_dir)
    device = check_str("--device", device)
    jobs = check_int("--jobs", jobs)
    quiet = check_bool("quiet", quiet)
    storage = check_optional_str("--storage", storage)
    workers = check_int("--workers", workers, 1)
    heartbeat = check_int("--heartbeat", DEFAULT_HEARTBEAT_S if heartbeat is None else heartbeat)
    resume_mixed_code = check_bool("--resume-mixed-code", resume_mixed_code)
    extend_path = check_optional_path("--extend-search", extend_search)
    if heartbeat < 1:
        raise ConfigError(f"--heartbeat must be >= 1 second, got {heartbeat}.")
    # Imports SQLAlchemy for a database URL, never Optuna or torch: a wrong URL costs no import time.
    check_storage_url(storage)
    if protocol_path is not None:
        protocol = add_protocol_file(protocol_path)
    if plugins.is_ref(loss):
        loss = plugins.load_ref("loss", loss)
    if dataset is not None and plugins.is_ref(dataset):
        dataset = plugins.load_ref("dataset", dataset)
    request = RunRequest(
        loss=loss,
        protocol=protocol,
        dataset=dataset,
        data_dir=None if data_path is None else str(data_path),
        budget=budget,
        seed=seed,
        sampler=sampler,
        overrides=user_overrides,
        out=out_path,
        results_dir=results_path,
        device=device,
        jobs=jobs,
        quiet=quiet,
        storage=storage,
        workers=workers,
        heartbeat=heartbeat,
        resume_mixed_code=resume_mixed_code,
        extend_search=extend_path,
    )
    # Names, values and output folders are checked before torch, Optuna and faiss are imported:
    # a mistake is reported in a fraction of a second instead of after seconds of imports.
    preflight(request)
    from benchmark.protocol.dispatch import runner_for

    protocol_run = runner_for(protocol)(request)
    result = protocol_run.run()
    # The protocol writes the record; the leaderboard is refreshed here, by the caller that ran it.
    result.leaderboard_paths = refresh_leaderboard(
        request.results_dir,
        result.record["dataset"],
        protocol,
        plots=protocol_run.LEADERBOARD_PLOTS,
        progress=protocol_run.progress,
    )
    return result


def refresh_leaderboard(
    results_dir: Path, dataset: str, protocol: str, *, plots: bool, progress: Progress
) -> list[Path]:
    """Rewrite the leaderboard of ``dataset``/``protocol`` from its records; the files written.

    The tables first (Markdown first: ``dmlbench run`` prints it), then, for a protocol whose
    leaderboard has them (``plots``), the plots (their PNG files are listed).
    """
    from benchmark.faults import kill_point
    from benchmark.report.tables import refresh

    def after_tables() -> None:
        kill_point("report.tables")
        if plots:
            progress.message("refreshing plots ...")

    # The records are read once for the tables and the plots; of the plot files the PNGs are listed.
    paths = refresh(results_dir, dataset, protocol, plots=plots, after_tables=after_tables)
    return [p for p in paths if p.parent.name != "plots" or p.suffix == ".png"]


def report(
    dataset: str,
    *,
    protocol: str = "mlrc",
    results_dir: str | Path = "results",
    metrics: str | Sequence[str] | None = None,
    budget: str | None = None,
    format: str = "md",
    convergence: bool = False,
) -> str:
    """The leaderboard of ``dataset``/``protocol`` from the records under ``results_dir``, rendered as
    ``format`` (md, csv, tex or json), as ``dmlbench report`` prints it; with ``convergence``, the
    convergence table instead (md or csv), as ``dmlbench report --convergence`` prints it.

    ``metrics`` is a metric name or a list of them (None: every metric the records hold).
    ``dataset`` and ``protocol`` are names (:data:`benchmark.checks.SAFE_NAME`), never paths: a
    wrong type or value is a :class:`~benchmark.errors.ConfigError`."""
    from benchmark.report.tables import FORMATS, render, resolve_metrics, select_records

    dataset = check_name("dataset", dataset)
    protocol = check_name("protocol", protocol)
    results = check_path("--results-dir", results_dir)
    metrics = check_metrics(metrics)
    budget = check_optional_str("--budget", budget)
    format = check_str("--format", format)
    convergence = check_bool("convergence", convergence)
    if convergence:
        from benchmark.report.convergence_table import render_convergence
        from benchmark.report.leaderboard import load_leaderboard

        # render_convergence refuses a format it does not write (ConfigError, naming md and csv).
        lb = load_leaderboard(results, dataset, protocol, budget=budget, metrics=metrics)
        return render_convergence(format, lb)
    if format not in FORMATS:
        raise ConfigError(f"Unknown report format {format!r}; valid: {', '.join(FORMATS)}.")
    by_budget = select_records(results, dataset, protocol, budget)
    chosen = resolve_metrics(by_budget, metrics)
    return render(format, dataset, protocol, by_budget, chosen)
