"""The documentation: generated pages are current, the README's excerpt is the tool's, the site builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.cli.docs import render as render_cli
from benchmark.report.readme import END, START, excerpt, main, render_readme

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_generated_from_the_parsers() -> None:
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert page == render_cli(), "regenerate: python -m benchmark.cli.docs > docs/reference/cli.md"


def test_readme_excerpt_is_the_tools() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert START in readme and END in readme
    assert readme == render_readme(readme, excerpt(ROOT / "results")), (
        "regenerate: python -m benchmark.report.readme"
    )


def test_readme_command_writes_only_when_asked_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    stale = f"head\n{START}\nstale rows\n{END}\ntail\n"
    readme.write_text(stale, encoding="utf-8")
    for argv, code in ((["--help"], 0), (["--readme", str(readme), "--no-such-option"], 2)):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == code
        assert readme.read_text(encoding="utf-8") == stale, argv
    capsys.readouterr()
    assert main(["--readme", str(readme), "--results-dir", str(ROOT / "results")]) == 0
    written = readme.read_text(encoding="utf-8")
    assert written == render_readme(stale, excerpt(ROOT / "results"))
    assert "stale rows" not in written and written.startswith("head\n") and written.endswith("tail\n")


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 10_000
    blocks = readme.split("```bash\n")
    assert "dmlbench run --protocol mlrc --loss mfcont" in blocks[1]
    assert "python -m pytest -q" in blocks[2]


def test_no_docs_page_cites_an_issue_number() -> None:
    pages = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    offenders = [str(p) for p in pages if "issue 1" in p.read_text(encoding="utf-8").lower()]
    assert not offenders


def test_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()
