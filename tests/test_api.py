"""The Python API (``from benchmark.api import run, report``): light to import, same output as the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import benchmark
from benchmark import api
from benchmark.cli.main import main
from benchmark.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def test_importing_the_api_names_does_not_import_torch() -> None:
    code = (
        "import sys, benchmark\n"
        "from benchmark.api import report, run\n"
        "assert callable(run) and callable(report) and benchmark.run is run\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        benchmark.nope  # noqa: B018


@pytest.mark.parametrize("protocol", ["mlrc", "traditional", "cbir"])
def test_report_is_what_dmlbench_report_prints(protocol: str, capsys: pytest.CaptureFixture[str]) -> None:
    results = REPO / "results"
    assert main(["report", "--dataset", "glyphs", "--protocol", protocol, "--results-dir", str(results)]) == 0
    printed = capsys.readouterr().out
    assert "| Loss |" in printed
    assert api.report("glyphs", protocol=protocol, results_dir=results) == printed


@pytest.mark.parametrize("protocol", ["mlrc", "traditional", "cbir"])
def test_convergence_report_is_what_dmlbench_report_prints(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    results = REPO / "results"
    args = ["report", "--dataset", "glyphs", "--protocol", protocol, "--results-dir", str(results)]
    assert main([*args, "--convergence"]) == 0
    printed = capsys.readouterr().out
    assert "| Loss | Search by patience |" in printed
    assert api.report("glyphs", protocol=protocol, results_dir=results, convergence=True) == printed
    with pytest.raises(ConfigError, match="Unknown convergence table format 'tex'"):
        api.report("glyphs", protocol=protocol, results_dir=results, convergence=True, format="tex")


def test_run_refuses_bad_arguments_before_any_compute(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--workers must be >= 1"):
        api.run("contrastive", workers=0, out=tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        api.run(f"{tmp_path}/missing.py:Loss", out=tmp_path)
    with pytest.raises(ConfigError, match="Unknown report format"):
        api.report("glyphs", format="docx", results_dir=REPO / "results")
