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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss": 123}, "--loss must be a non-empty string without NUL, got 123 (int)"),
        ({"loss": None}, "--loss must be a non-empty string without NUL, got None (NoneType)"),
        ({"seed": "0"}, "--seed must be an integer, got '0' (str)"),
        ({"seed": True}, "--seed must be an integer, got True (bool)"),
        ({"seed": 1.5}, "--seed must be an integer, got 1.5 (float)"),
        ({"budget": None}, "--budget must be a non-empty string without NUL, got None (NoneType)"),
        ({"jobs": "2"}, "--jobs must be an integer, got '2' (str)"),
        ({"device": 5}, "--device must be a non-empty string without NUL, got 5 (int)"),
        ({"out": None}, "--out must be a path (str or pathlib.Path), got None (NoneType)"),
        ({"results_dir": 3}, "--results-dir must be a path (str or pathlib.Path), got 3 (int)"),
        ({"workers": 2.0}, "--workers must be an integer, got 2.0 (float)"),
        ({"heartbeat": "30"}, "--heartbeat must be an integer, got '30' (str)"),
        ({"quiet": 1}, "quiet must be True or False, got 1 (int)"),
        ({"overrides": [("train.lr", 1e-4)]}, "overrides must be a mapping of --set keys to values"),
        ({"overrides": {1: 2}}, "--set: a key must be a non-empty string like 'train.lr', got 1"),
        ({"protocol": "../../x"}, "Invalid protocol name '../../x'"),
        ({"protocol": None}, "The protocol name must be a string, got None (NoneType)"),
    ],
)
def test_run_refuses_wrong_argument_types(kwargs: dict[str, object], message: str, tmp_path: Path) -> None:
    """Each a ConfigError (exit 2 on the CLI), never a TypeError, and nothing written."""
    args: dict[str, object] = {"loss": "contrastive", "out": tmp_path / "runs", **kwargs}
    loss = args.pop("loss")
    with pytest.raises(ConfigError) as info:
        api.run(loss, **args)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "flags"),
    [
        ({"seed": -1}, ["--seed", "-1"]),
        ({"jobs": -2}, ["--jobs", "-2"]),
        ({"workers": 0}, ["--workers", "0"]),
        ({"heartbeat": 0}, ["--heartbeat", "0"]),
        ({"device": "tpu"}, ["--device", "tpu"]),
        ({"protocol": "../../x"}, ["--protocol", "../../x"]),
    ],
)
def test_run_range_errors_say_what_the_cli_says(
    kwargs: dict[str, object], flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--out", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results")]
    assert main(["run", "--loss", "contrastive", *out, *flags]) == 2
    cli_message = capsys.readouterr().err.strip().removeprefix("dmlbench: error: ")
    with pytest.raises(ConfigError) as info:
        api.run("contrastive", out=tmp_path / "runs", results_dir=tmp_path / "results", **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == cli_message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": None}, "The dataset name must be a string, got None (NoneType)"),
        ({"dataset": 123}, "The dataset name must be a string, got 123 (int)"),
        ({"dataset": "../glyphs"}, "Invalid dataset name '../glyphs'"),
        ({"dataset": "glyphs", "protocol": "../mlrc"}, "Invalid protocol name '../mlrc'"),
        ({"dataset": "glyphs", "results_dir": None}, "--results-dir must be a path"),
        ({"dataset": "glyphs", "metrics": [1]}, "metrics must be a metric name or a list of them"),
        ({"dataset": "glyphs", "convergence": "yes"}, "convergence must be True or False"),
    ],
)
def test_report_refuses_wrong_argument_types(kwargs: dict[str, object], message: str) -> None:
    dataset = kwargs.pop("dataset")
    with pytest.raises(ConfigError) as info:
        api.report(dataset, **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_report_metrics_as_a_string_is_a_list_of_one() -> None:
    results = REPO / "results"
    one = api.report("glyphs", results_dir=results, metrics="map_at_r", format="csv")
    assert one == api.report("glyphs", results_dir=results, metrics=["map_at_r"], format="csv")
    header = one.splitlines()[0]
    assert "map_at_r" in header and "precision_at_1" not in header
