"""``dmlbench run``: one protocol (mlrc, traditional, cbir) for one loss, from training to leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmark import api
from benchmark.config import parse_set_option
from benchmark.errors import DmlbenchError
from benchmark.models.pretrained import BUILTIN_PREFIX
from benchmark.search.options import DEFAULT_HEARTBEAT_S


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a protocol for one loss", description=__doc__)
    p.add_argument(
        "--protocol",
        default=None,
        help="protocol file name in protocols/ or on $DMLBENCH_PROTOCOL_PATH (default: mlrc)",
    )
    p.add_argument(
        "--protocol-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="a protocol file of your own, by path; its name (the file name) must be a new one "
        "(replaces --protocol)",
    )
    p.add_argument(
        "--loss",
        required=True,
        help="loss name (see `dmlbench list losses`), or your own: MODULE:NAME or PATH.py:NAME",
    )
    p.add_argument(
        "--dataset", default=None, help="dataset name or MODULE:NAME (default: the protocol's, glyphs)"
    )
    p.add_argument("--data-dir", default=None, help="where the dataset's files are")
    p.add_argument("--budget", default="mini", help="paper | mini | smoke (default: mini)")
    p.add_argument(
        "--seed", type=int, default=0, help="run seed (folds are seed-free; models, samplers use it)"
    )
    p.add_argument(
        "--seeds",
        default=None,
        metavar="S1,S2,...",
        help="run the whole protocol (search and test stage) once per seed, one after another, e.g. "
        "0,1,2; the leaderboard folds them into one row whose interval covers the search seed too "
        "(replaces --seed)",
    )
    p.add_argument("--sampler", default=None, help="gp | tpe | random (default: the protocol's, gp)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.lr=1e-4 or --set loss.margin=0.1 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=Path("runs"), help="run artefacts directory (default: runs/)")
    p.add_argument("--results-dir", type=Path, default=Path("results"), help="records and leaderboards")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="fold-parallel worker processes (default 0: one per CPU core, max 4; 1 on GPU)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local search processes sharing the study (several trials at once; each runs its folds "
        "with --jobs, default 1 per worker). This process waits, then runs the test stage",
    )
    p.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="share the study through a database, e.g. postgresql://user@host/db: the same command "
        "started on several machines runs one search (default: the journal file in the run dir)",
    )
    p.add_argument(
        "--heartbeat",
        type=int,
        default=DEFAULT_HEARTBEAT_S,
        metavar="SECONDS",
        help="with --storage: heartbeat interval of a running trial; a trial silent for twice this is "
        f"failed and retried with the same parameters (default {DEFAULT_HEARTBEAT_S})",
    )
    p.add_argument(
        "--trunk-weights",
        type=Path,
        default=None,
        metavar="PATH",
        help="local state dict of the trunk's pretrained weights (same as --set model.trunk_weights=PATH; "
        "weights are never downloaded)",
    )
    p.add_argument(
        "--resume-mixed-code",
        action="store_true",
        help="resume a run directory although other code (another commit or other local changes) "
        "trained part of it; the record and leaderboard then say that its folds mix code versions "
        "(default: refuse)",
    )
    p.add_argument(
        "--extend-search",
        type=Path,
        metavar="SOURCE",
        help="start this run's search from the trials of SOURCE, the same run with a smaller "
        "search.n_trials: its run directory, or its record (a .json file; the journal is rebuilt "
        "from the record's trials). Its first trials are exactly those; only the extra ones are "
        "trained; the record names SOURCE (default: search from scratch)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(handler=handle)


def parse_seeds(text: str | None, seed: int) -> list[int]:
    """``--seeds 0,1,2`` as a list (each a non-negative integer, no repeats); ``[seed]`` without it."""
    if text is None:
        return [seed]
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        seeds = [int(item) for item in items]
    except ValueError:
        raise DmlbenchError(f"--seeds takes comma-separated integers, e.g. 0,1,2; got {text!r}.") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise DmlbenchError(f"--seeds needs distinct non-negative integers; got {text!r}.")
    return seeds


def handle(args: argparse.Namespace) -> int:
    seeds = parse_seeds(getattr(args, "seeds", None), args.seed)
    if getattr(args, "seeds", None) is not None and args.seed != 0:
        raise DmlbenchError("Give either --seed or --seeds, not both.")
    for i, seed in enumerate(seeds):
        if len(seeds) > 1:
            print(f"run: seed {seed} ({i + 1}/{len(seeds)})", flush=True)
        run_one(args, seed)
    return 0


def run_one(args: argparse.Namespace, seed: int) -> None:
    """One protocol run at ``seed``; prints the refreshed leaderboard and what it wrote."""
    overrides = dict(parse_set_option(item) for item in args.overrides)
    if args.trunk_weights is not None:
        # A built-in name (builtin:NAME) is not a path: resolving it would make it one.
        raw = str(args.trunk_weights)
        is_name = raw.startswith(BUILTIN_PREFIX)
        overrides["model.trunk_weights"] = raw if is_name else str(args.trunk_weights.expanduser().resolve())
    if args.protocol is not None and args.protocol_file is not None:
        raise DmlbenchError("Give either --protocol or --protocol-file, not both.")
    result = api.run(
        args.loss,
        protocol="mlrc" if args.protocol is None else args.protocol,
        protocol_file=args.protocol_file,
        dataset=args.dataset,
        data_dir=args.data_dir,
        budget=args.budget,
        seed=seed,
        sampler=args.sampler,
        overrides=overrides,
        out=args.out,
        results_dir=args.results_dir,
        device=args.device,
        jobs=args.jobs,
        quiet=args.quiet,
        storage=args.storage,
        workers=args.workers,
        heartbeat=args.heartbeat,
        resume_mixed_code=args.resume_mixed_code,
        extend_search=args.extend_search,
    )
    md = result.leaderboard_paths[0]
    print()
    print(md.read_text(encoding="utf-8"))
    timings = result.record["timings_s"]
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    print(f"record:      {result.record_path}")
    print(f"run dir:     {result.run_dir}")
    for path in result.leaderboard_paths:
        print(f"wrote:       {path}")
