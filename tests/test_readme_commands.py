"""Every command of the README's "Next" block runs, at the smoke budget, as a reader would paste it.

Each `dmlbench run` gets `--budget smoke` (unless it names a budget) and every command writes under
a temporary `--results-dir`/`--out` that starts with a copy of the committed omniglot records, so
`report`, `compare` and `plan` read a real board. Needs the Omniglot data of the shared folder
(`../shared/data/omniglot`), as the README's command does.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OMNIGLOT = ROOT.parent / "shared" / "data" / "omniglot"


def readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Next", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        for part in filter(None, (p.strip() for p in line.split("&&"))):
            commands.append(shlex.split(part))
    return commands


def test_the_block_is_found() -> None:
    commands = readme_commands()
    assert commands and all(c[0] == "dmlbench" for c in commands)
    assert {c[1] for c in commands} >= {"list", "run", "report", "compare", "plan"}


@pytest.mark.slow
@pytest.mark.skipif(not OMNIGLOT.is_dir(), reason=f"no Omniglot data at {OMNIGLOT}")
def test_readme_next_commands_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "omniglot", results / "omniglot")
    for command in readme_commands():
        args = command[1:]
        if args[0] == "run":
            if "--budget" not in args:
                args += ["--budget", "smoke"]
            args += ["--out", str(tmp_path / "runs"), "--quiet"]
        if args[0] in ("run", "report", "compare", "plan"):
            args += ["--results-dir", str(results)]
        proc = subprocess.run(
            [sys.executable, "-m", "benchmark.cli.main", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"{shlex.join(command)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr


def test_the_plugin_contract_example_runs(tmp_path: Path) -> None:
    """The runnable example of docs/guide/plugins.md's contract section, as printed there."""
    page = (ROOT / "docs" / "guide" / "plugins.md").read_text(encoding="utf-8")
    block = page.split("## The contract, in full", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    (command,) = [shlex.split(line) for line in block.splitlines() if line.strip()]
    args = [str(tmp_path / a[len("/tmp/") :]) if a.startswith("/tmp/") else a for a in command[1:]]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.cli.main", *args, "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "r" / "glyphs" / "mlrc" / "leaderboard.md").is_file()
