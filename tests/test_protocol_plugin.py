"""The example protocol plugin (``examples/my_protocol``, issue 29 item 7): installed, run, reported.

It is ``pip install``-ed into a fresh virtual environment (``python -m venv``; dmlbench and its
dependencies come from the test's own environment through a ``.pth`` file, so nothing is
downloaded) and driven through that environment's interpreter in fresh processes, so dmlbench
finds it only through its ``dmlbench.protocols`` entry point, as after ``pip install`` in a user's
environment. CI runs these with the rest of the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import CLI_DRIVER

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "my_protocol"


def install_example(tmp_path: Path) -> Path:
    """A fresh venv in ``tmp_path/venv`` that sees this environment's packages (a ``.pth``), with
    ``pip install examples/my_protocol`` run in it (offline, from a copy so that the build leaves
    nothing in the checkout); the venv's site-packages folder."""
    src, venv = tmp_path / "my_protocol_src", tmp_path / "venv"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(src)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    # addsitedir, not a bare path: the outer environment's own .pth files (editable installs,
    # chained environments) must be processed too.
    outer = sysconfig.get_paths()["purelib"]
    (site / "outer-environment.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert (site / "my_protocol" / "smalldb.toml").is_file(), "the example did not install into the venv"
    return site


def venv_python(site: Path) -> Path:
    """The interpreter of the venv whose site-packages folder is ``site``."""
    return site.parents[2] / "bin" / "python"


def cli(
    tmp_path: Path, site: Path, cache: Path, *args: str, include: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``dmlbench ARGS`` from ``tmp_path`` with the installed example importable (and no other
    plugin); ``include``: the protocol files' include path (``DMLBENCH_PROTOCOL_PATH``)."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DMLBENCH_PLUGINS", "DMLBENCH_PROTOCOL_PATH")},
        "PYTHONPATH": str(REPO),
        "DMLBENCH_CACHE": str(cache),
        **({"DMLBENCH_PROTOCOL_PATH": str(include)} if include is not None else {}),
    }
    return subprocess.run(
        [str(venv_python(site)), "-c", CLI_DRIVER, *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800,
    )  # fmt: skip


@pytest.mark.slow
def test_installed_protocol_plugin_runs_smoke_and_report_shows_its_board(
    tmp_path: Path, cache_dir: Path
) -> None:
    site = install_example(tmp_path)
    toml = site / "my_protocol" / "smalldb.toml"  # the protocol file ships with the package
    # Its folder on the include path, the file is listed (and `--protocol smalldb` would run it).
    listed = cli(tmp_path, site, cache_dir, "list", "protocols", include=toml.parent)
    assert listed.returncode == 0, listed.stderr
    assert f"at most N training images per class  ({toml})" in listed.stdout
    run = cli(
        tmp_path, site, cache_dir,
        "run", "--protocol-file", str(toml), "--budget", "smoke", "--loss", "contrastive",
        "--set", "settings.database_per_class=3", "--quiet",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    records = tmp_path / "results" / "glyphs" / "smalldb" / "records"
    record = json.loads((records / "contrastive.smoke.seed0.json").read_text())
    assert (record["kind"], record["protocol"]) == ("smalldb", "smalldb")
    # The record names the setting, and the setting did what it says: 3 database images per class.
    assert record["config"]["settings"] == {"database_per_class": 3}
    assert {"key": "settings.database_per_class", "paper": 4, "value": 3} in record["deviations"]
    data = record["data"]
    assert data["database_per_class"] == 3 and data["n_database_images"] == 3 * data["n_classes"]
    # The protocol's provenance, as a loss plugin's: its distribution, version and declaration file.
    (source,) = [p for p in record["plugins"] if p["kind"] == "protocol"]
    assert (source["name"], source["ref"]) == ("smalldb", "my_protocol:PROTOCOL")
    assert (source["distribution"], source["version"]) == ("dmlbench-my-protocol", "0.1.0")
    declared = site / "my_protocol" / "__init__.py"
    assert source["sha256"] == hashlib.sha256(declared.read_bytes()).hexdigest()

    # Without --protocol, report looks for mlrc records, and says which protocol has some.
    default = cli(tmp_path, site, cache_dir, "report")
    assert default.returncode == 2 and "Name a --dataset; no 'mlrc' records under results; " in default.stderr
    assert "records exist for: glyphs/smalldb (choose one with --dataset and --protocol)." in default.stderr
    report = cli(tmp_path, site, cache_dir, "report", "--protocol", "smalldb")  # the one dataset
    assert report.returncode == 0, report.stderr[-3000:]
    board = report.stdout
    assert "# Leaderboard: `glyphs`, protocol `smalldb`" in board
    assert "| Contrastive |" in board
    assert "Small database: at most 3 training (= database) images per class." in board
    assert "contrastive: protocol plugin: dmlbench-my-protocol 0.1.0 (my_protocol:PROTOCOL" in board
    assert "- `settings.database_per_class` = 3 (paper 4)" in board


@pytest.mark.slow
def test_protocol_plugin_settings_are_checked_strictly_before_torch_is_imported(
    tmp_path: Path, cache_dir: Path
) -> None:
    site = install_example(tmp_path)
    toml = site / "my_protocol" / "smalldb.toml"
    args = ("run", "--protocol-file", str(toml), "--budget", "smoke", "--loss", "contrastive", "--quiet")
    # An unknown key in the file's [settings] table (a copy, next to no other protocol file).
    mine = tmp_path / "own" / "smalldb.toml"
    mine.parent.mkdir()
    text = toml.read_text(encoding="utf-8")
    assert "database_per_class = 4" in text
    mine.write_text(text.replace("database_per_class = 4", "database_per_klass = 4"), encoding="utf-8")
    bad_file = cli(tmp_path, site, cache_dir, *args[:2], str(mine), *args[3:])
    # ... the same on the command line, a wrong type, and a value the settings block refuses.
    bad_set = cli(tmp_path, site, cache_dir, *args, "--set", "settings.databse_per_class=3")
    bad_type = cli(tmp_path, site, cache_dir, *args, "--set", "settings.database_per_class=many")
    bad_value = cli(tmp_path, site, cache_dir, *args, "--set", "settings.database_per_class=1")
    expected = [
        (bad_file, "Unknown config key 'settings.database_per_klass' in section [settings]. "
         "Did you mean 'settings.database_per_class'?"),
        (bad_set, "Unknown config key 'settings.databse_per_class' in section [settings]."),
        (bad_type, "Config key 'settings.database_per_class' must be an integer"),
        (bad_value, "settings.database_per_class must be >= 2, got 1."),
    ]  # fmt: skip
    for out, message in expected:
        assert out.returncode == 2, out.stderr
        assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert "TORCH_IMPORTED=False" in out.stderr, out.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()
