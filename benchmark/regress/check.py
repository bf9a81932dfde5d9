"""The two modes of ``dmlbench regress``: check the suite against the baselines, or regenerate them.

Both train on the CPU with one torch thread: same seed + same environment then gives bit-identical
numbers, so a check's delta is caused by a code, data or library change and nothing else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from benchmark.engine.environment import environment_info
from benchmark.errors import DmlbenchError
from benchmark.io import differing_keys
from benchmark.regress.baselines import (
    CaseBaseline,
    build_case_baseline,
    check_mean,
    load_baselines,
    save_baselines,
)
from benchmark.regress.cases import Case, Settings
from benchmark.regress.compare import (
    Row,
    Status,
    compare_case,
    improvement_note,
    regression_diff,
    render_table,
    summary_line,
)
from benchmark.regress.training import METRIC_NAMES, PreparedCase, prepare_case, require_data, run_case


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """One intra-op torch thread for the duration (bit-reproducible CPU numbers), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _prepare_all(cases: Sequence[Case], settings: Settings, cache: Path) -> list[PreparedCase]:
    # Every case's config and data is resolved before any training, so bad input fails in seconds.
    return [prepare_case(c, settings, cache) for c in cases]


#: Environment entries that decide whether same-seed CPU runs are bit-identical.
_BIT_ENVIRONMENT = ("python", "machine", "cpu_model", "cpu_capability", "torch_threads")


def environment_note(baselines: Iterable[CaseBaseline]) -> str:
    """Which parts of the environment differ from the baselines' (why values may not be identical)."""
    with single_thread():  # the checks ran with one thread
        now = environment_info(torch.device("cpu"))
    lines: list[str] = []
    for b in baselines:
        env = b.provenance.get("environment", {})
        then = {**{k: env.get(k, "not recorded") for k in _BIT_ENVIRONMENT}, **env.get("packages", {})}
        here = {**{k: now.get(k) for k in _BIT_ENVIRONMENT}, **now["packages"]}
        diff = [
            f"{k}: {then[k]} -> {here.get(k)}" for k in then if k != "dmlbench" and then[k] != here.get(k)
        ]
        line = "; ".join(diff) if diff else "none found (a code or data change, or an unrecorded library)"
        if line not in lines:
            lines.append(line)
    return "Environment differences from the baselines' (same-seed values are bit-identical only on an " + (
        "identical environment):\n  " + "\n  ".join(lines)
    )


def _stored(cases: Sequence[Case], baselines_dir: Path) -> dict[str, CaseBaseline]:
    """The baseline of every case; a missing one is an error naming the --update command."""
    found: dict[str, CaseBaseline] = {}
    missing = []
    for dataset in dict.fromkeys(c.dataset for c in cases):
        stored = load_baselines(baselines_dir, dataset)
        for c in (c for c in cases if c.dataset == dataset):
            if c.loss in stored:
                found[c.name] = stored[c.loss]
            else:
                missing.append(c.name)
    if missing:
        raise DmlbenchError(
            f"No baseline for {', '.join(missing)} in {baselines_dir}. Generate it from real runs with: "
            f"dmlbench regress --update --cases {','.join(missing)}"
            + (f" --baselines {baselines_dir}" if baselines_dir.name != "baselines" else "")
        )
    return found


def run_check(
    cases: Sequence[Case],
    settings: Settings,
    baselines_dir: Path,
    cache: Path,
    out: TextIO,
    exact: bool = False,
) -> tuple[int, list[Row]]:
    """Train each case with the check seed and compare with its baseline; exit code 0 or 1.

    ``exact``: any difference from the baseline value fails (meant for the baseline's environment).
    """
    t0 = time.perf_counter()
    for c in cases:
        require_data(c)
    stored = _stored(cases, baselines_dir)
    prepared = _prepare_all(cases, settings, cache)
    notes = []
    for p in prepared:
        base = stored[p.case.name]
        identity = p.identity(settings)
        if base.identity != identity:
            differ = differing_keys(base.identity, identity)
            raise DmlbenchError(
                f"The baseline of {p.case.name} was produced with a different configuration (differs in: "
                f"{', '.join(d for d in differ if d != 'hash')}); its numbers are not comparable. If the "
                f"change is intended, regenerate it: dmlbench regress --update --cases {p.case.name}"
            )
        if base.data_fingerprint != p.data_fingerprint:
            notes.append(
                f"WARNING {p.case.name}: the data differ from the baseline's (fingerprint "
                f"{p.data_fingerprint} vs {base.data_fingerprint}); a delta may come from the data."
            )
    rows: list[Row] = []
    with single_thread():
        for i, p in enumerate(prepared, 1):
            runs = [run_case(p, settings, seed) for seed in settings.check_seeds]
            failure = next((f"seed {r.seed}: {r.failure}" for r in runs if r.failure), None)
            base = stored[p.case.name]
            expected = {m: (b.value, b.tolerance) for m, b in base.metrics.items()}
            now = None if failure else {m: check_mean(r.metrics[m] for r in runs) for m in expected}
            rows += compare_case(p.case.name, expected, now, failure, exact)
            status = "failed" if failure else "done"
            wall = sum(r.wall_s for r in runs)
            print(f"[{i}/{len(prepared)}] {p.case.name}: {status} in {wall:.1f}s", file=out, flush=True)
    provenance = {name: b.provenance_line() for name, b in stored.items()}
    if any(r.status is not Status.IDENTICAL for r in rows):
        notes.append(environment_note(stored.values()))
    print(file=out)
    print(
        f"dmlbench regress: {len(prepared)} case(s), mean over seeds {list(settings.check_seeds)}, "
        f"fold {settings.fold}, "
        f"baselines {baselines_dir}" + (", --exact (any difference fails)" if exact else ""),
        file=out,
    )
    print(render_table(rows), file=out)
    for text in (*notes, improvement_note(rows), regression_diff(rows, provenance)):
        if text:
            print(file=out)
            print(text, file=out)
    print(file=out)
    print(f"{summary_line(rows)}; total {time.perf_counter() - t0:.1f}s", file=out)
    return (1 if any(r.status.fails for r in rows) else 0), rows


def run_update(
    cases: Sequence[Case],
    settings: Settings,
    baselines_dir: Path,
    cache: Path,
    out: TextIO,
    command: str,
) -> list[Path]:
    """Train every case with every suite seed and write the baselines (merged per dataset file)."""
    t0 = time.perf_counter()
    prepared = _prepare_all(cases, settings, cache)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    env = environment_info(torch.device("cpu"))
    by_dataset: dict[str, dict[str, CaseBaseline]] = {}
    lines = []
    with single_thread():
        env["torch_threads"] = torch.get_num_threads()
        provenance = {"command": command, "created": created, "git": env.pop("git"), "environment": env}
        for i, p in enumerate(prepared, 1):
            per_seed: dict[int, dict[str, float]] = {}
            wall: dict[int, float] = {}
            for seed in settings.seeds:
                run = run_case(p, settings, seed)
                if run.failure is not None:
                    raise DmlbenchError(
                        f"Cannot baseline {p.case.name}: seed {seed} failed ({run.failure}). A regression "
                        "case must train stably with the loss defaults; change the suite or fix the loss."
                    )
                per_seed[seed], wall[seed] = dict(run.metrics), run.wall_s
                print(
                    f"[{i}/{len(prepared)}] {p.case.name} seed {seed}: "
                    + ", ".join(f"{k} {v:.4f}" for k, v in run.metrics.items())
                    + f" ({run.wall_s:.1f}s)",
                    file=out,
                    flush=True,
                )
            baseline = build_case_baseline(
                p.case.name,
                per_seed,
                settings.check_seeds,
                settings.tolerance_quantile,
                settings.tolerance_floor,
                p.identity(settings),
                p.data_fingerprint,
                provenance,
                wall,
            )
            by_dataset.setdefault(p.case.dataset, {})[p.case.loss] = baseline
            for m in METRIC_NAMES:
                mb = baseline.metrics[m]
                values = list(mb.per_seed.values())
                lines.append(
                    f"{p.case.name:24s} {m:14s} check mean {mb.value:.4f}"
                    f"  mean {np.mean(values):.4f}  sd {np.std(values, ddof=1):.4f}"
                    f"  tolerance {mb.tolerance:.4f}"
                )
    paths = [save_baselines(baselines_dir, ds, cases_) for ds, cases_ in by_dataset.items()]
    print(file=out)
    print("\n".join(lines), file=out)
    print(file=out)
    for path in paths:
        print(f"wrote: {path}", file=out)
    print(f"total {time.perf_counter() - t0:.1f}s", file=out)
    return paths
