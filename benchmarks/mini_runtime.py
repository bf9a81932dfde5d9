"""Wall time of README command 1 (`dmlbench run --protocol mlrc --loss mfcont`, mini budget).

Runs the command N times in fresh output directories (the dataset cache is kept after the first,
as on a user's machine) and prints per-run total/search/test seconds from the run records and
the medians. Usage: python benchmarks/mini_runtime.py [N] [extra dmlbench args...]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    extra = sys.argv[2:]
    rows = []
    for i in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "benchmark.cli.main",
                "run",
                "--protocol",
                "mlrc",
                "--loss",
                "mfcont",
                "--quiet",
                "--out",
                f"{tmp}/runs",
                "--results-dir",
                f"{tmp}/results",
                *extra,
            ]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            record = json.loads(next(Path(tmp, "results").rglob("records/*.json")).read_text())
            t = record["timings_s"]
            sep = record["test"]["summary"]["separated"]["map_at_r"]
            rows.append(
                (wall, t["search"], t["test"], sep["mean"], record["untrained"]["separated"]["map_at_r"])
            )
            print(
                f"run {i + 1}: wall {wall:.1f}s (search {t['search']:.1f}s, test {t['test']:.1f}s), "
                f"sep MAP@R {100 * sep['mean']:.2f} ± {100 * sep['half_width']:.2f}, "
                f"untrained {100 * rows[-1][4]:.2f}",
                flush=True,
            )
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(
        f"median of {n}: wall {med[0]:.1f}s, search {med[1]:.1f}s, test {med[2]:.1f}s, "
        f"sep MAP@R {100 * med[3]:.2f}, untrained {100 * med[4]:.2f}"
    )


if __name__ == "__main__":
    main()
