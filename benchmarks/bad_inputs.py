"""Every bad input of issue 14 §1-§2 run through the real CLI: exit code, first stderr line, time.

Usage (from the repository root; ``--code`` picks which checkout's ``benchmark`` package runs)::

    python benchmarks/bad_inputs.py --code /path/to/checkout [--timeout 45] > table.md

Each case is a fresh ``python -m benchmark.cli.main`` process on the ``smoke`` budget with its
own temporary output folders. A case still running after ``--timeout`` seconds was *accepted*
(it started a run); it is killed and reported as such. The broken-protocol cases run on a copy
of the checkout (its ``benchmark/`` and ``protocols/``) with one invalid TOML file added, so the
checkout itself is never modified.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (name, issue section, dmlbench arguments); {tmp} is the case's temporary folder.
RUN = [
    "run",
    "--budget",
    "smoke",
    "--quiet",
    "--loss",
    "mfcont",
    "--out",
    "{tmp}/runs",
    "--results-dir",
    "{tmp}/res",
]
CASES: list[tuple[str, str, list[str]]] = [
    ("train.lr=-1", "1", [*RUN, "--set", "train.lr=-1"]),
    ("train.lr=nan", "1", [*RUN, "--set", "train.lr=nan"]),
    ("train.lr=1e400", "1", [*RUN, "--set", "train.lr=1e400"]),
    ("train.weight_decay=-5", "1", [*RUN, "--set", "train.weight_decay=-5"]),
    ("--seed -1", "1", [*RUN, "--seed", "-1"]),
    ("--device bogus", "1", [*RUN, "--device", "bogus"]),
    (
        "--trunk-weights TEXTFILE (pretrained=true)",
        "1",
        [*RUN, "--trunk-weights", "{tmp}/notes.pth", "--set", "model.pretrained=true"],
    ),
    ("--out on a read-only folder (/sys)", "1", [*RUN, "--out", "/sys/dmlbench-runs"]),
    ("--results-dir on a read-only folder (/sys)", "1", [*RUN, "--results-dir", "/sys/dmlbench-res"]),
    (
        "report with a truncated record",
        "1",
        ["report", "--results-dir", "{tmp}/records", "--dataset", "glyphs"],
    ),
    ("train.lr=0", "2", [*RUN, "--set", "train.lr=0"]),
    ("--jobs -1", "2", [*RUN, "--jobs", "-1"]),
    ("data.max_per_class=1", "2", [*RUN, "--set", "data.max_per_class=1"]),
    (
        "folder dataset, 16 classes x 1 image",
        "2",
        [*RUN, "--dataset", "folder", "--data-dir", "{tmp}/singletons"],
    ),
    ("data.max_classes=-3", "2", [*RUN, "--set", "data.max_classes=-3"]),
    ("--trunk-weights FILE with model.pretrained=false", "2", [*RUN, "--trunk-weights", "{tmp}/notes.pth"]),
    ("search.n_trials=10**21", "2", [*RUN, "--set", "search.n_trials=1000000000000000000000"]),
    ("test.reps=10**7", "2", [*RUN, "--set", "test.reps=10000000"]),
    ("broken protocols/mine.toml: list protocols", "2", ["list", "protocols"]),
    ("broken protocols/mine.toml: run --protocol mine", "2", [*RUN, "--protocol", "mine"]),
    ("broken protocols/mine.toml: run --protocol mlcr (typo)", "2", [*RUN, "--protocol", "mlcr"]),
]


def prepare(tmp: Path, repo: Path) -> None:
    """The files the cases point at."""
    from PIL import Image

    (tmp / "notes.pth").write_text("these are not weights\n")
    for c in range(16):
        folder = tmp / "singletons" / f"class{c:02d}"
        folder.mkdir(parents=True)
        Image.new("L", (28, 28), color=c * 10).save(folder / "only.png")
    records = tmp / "records" / "glyphs" / "mlrc" / "records"
    records.mkdir(parents=True)
    committed = sorted((repo / "results" / "glyphs" / "mlrc" / "records").glob("*.json"))
    shutil.copy(committed[0], records / committed[0].name)
    text = committed[1].read_text(encoding="utf-8")
    (records / committed[1].name).write_text(text[: len(text) // 2], encoding="utf-8")


def broken_copy(code: Path, tmp: Path) -> Path:
    """A copy of the checkout's package and protocols with one invalid protocol file added."""
    copy = tmp / "checkout"
    shutil.copytree(code / "benchmark", copy / "benchmark", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(code / "protocols", copy / "protocols")
    (copy / "protocols" / "mine.toml").write_text("[protocol\nname = 'mlrc'\n")
    return copy


def run_case(args: list[str], code: Path, tmp: Path, timeout: float, cache: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code), "DMLBENCH_CACHE": str(cache)}
    argv = [sys.executable, "-m", "benchmark.cli.main", *[a.replace("{tmp}", str(tmp)) for a in args]]
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        return {"exit": f"running at {timeout:.0f} s (accepted)", "first": "", "seconds": timeout}
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    first = lines[0] if lines else "(no stderr)"
    if any(line.startswith(("Traceback", "concurrent.futures.process._RemoteTraceback")) for line in lines):
        first = f"Traceback ... {lines[-1]}"  # the exception line is the informative one
    return {"exit": proc.returncode, "first": first, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--code", type=Path, required=True, help="checkout whose benchmark package runs")
    parser.add_argument(
        "--timeout", type=float, default=45.0, help="seconds before a case counts as accepted"
    )
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "dmlbench-bad-inputs-cache"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this text")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    results = []
    for name, section, case_args in CASES:
        if args.only is not None and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            prepare(tmp, repo)
            code = broken_copy(args.code, tmp) if name.startswith("broken") else args.code
            result = {
                "case": name,
                "section": section,
                **run_case(case_args, code, tmp, args.timeout, args.cache),
            }
        results.append(result)
        print(f"{name}: {result['exit']} ({result['seconds']:.1f} s) {result['first']}", file=sys.stderr)
    print("| § | input | exit | first line of stderr | s |")
    print("|---|---|---|---|---|")
    for r in results:
        first = str(r["first"]).replace("|", "\\|")[:220]
        print(f"| {r['section']} | {r['case']} | {r['exit']} | {first} | {float(r['seconds']):.1f} |")  # type: ignore[arg-type]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
