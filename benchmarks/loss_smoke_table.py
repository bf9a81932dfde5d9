"""One `--budget smoke` MLRC run per registered loss on glyphs: wall time and test MAP@R.

Prints a Markdown table (loss, wall s, separated / concatenated MAP@R ± CI in %, untrained).
Usage: python benchmarks/loss_smoke_table.py [--jobs N]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark.losses import LOSSES


def main() -> None:
    extra = sys.argv[1:]
    print("| loss | smoke wall (s) | sep. MAP@R (%) | concat. MAP@R (%) | untrained sep. (%) | trials ok |")
    print("|---|---|---|---|---|---|")
    for name in LOSSES.names():
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "benchmark.cli.main",
                "run",
                "--loss",
                name,
                "--budget",
                "smoke",
                "--quiet",
                "--out",
                f"{tmp}/runs",
                "--results-dir",
                f"{tmp}/res",
                *extra,
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(
                    f"| {name} | {wall:.1f} | FAILED: {proc.stderr.strip().splitlines()[-1]} | | | |",
                    flush=True,
                )
                continue
            rec = json.loads(next(Path(tmp, "res").rglob("records/*.json")).read_text())
            s = rec["test"]["summary"]
            ok = sum(t["state"] == "COMPLETE" for t in rec["search"]["trials"])
            cells = [
                f"{100 * s[m]['map_at_r']['mean']:.2f} ± {100 * s[m]['map_at_r']['half_width']:.2f}"
                for m in ("separated", "concatenated")
            ]
            untrained = 100 * rec["untrained"]["separated"]["map_at_r"]
            print(f"| {name} | {wall:.1f} | {cells[0]} | {cells[1]} | {untrained:.2f} | {ok}/3 |", flush=True)


if __name__ == "__main__":
    main()
