"""The built wheel works on its own: installed into a fresh venv outside the checkout, it finds its
protocol files (package data) and runs a smoke benchmark.

Route (offline, seconds): ``pip wheel --no-deps --no-build-isolation`` from a copy of the sources
(the build writes build/ and *.egg-info beside them), a venv made with ``--without-pip``, the wheel
installed by this interpreter's pip (``pip --python VENV``), and the dependencies reused from this
interpreter's site-packages through a ``.pth`` file (its path from ``sysconfig``, so it is the
checkout's ``.venv`` in CI too). A ``.pth`` line only adds a directory: the editable-install hook of
the checkout living there is not run, so ``benchmark`` is imported from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from benchmark.config import protocol_names

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "setup.py", "README.md", "benchmark", "protocols"]


def build_and_install(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources and install it into a fresh venv; its ``bin``."""
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    pip = [sys.executable, "-m", "pip"]
    quiet = ["--no-deps", "--no-index", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", *quiet, "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = (tmp / "dist").glob("dmlbench-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, env=_clean_env(),
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "_dmlbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(python), "install", *quiet, str(wheel)], check=True)
    return venv / "bin"


def _clean_env(**extra: str) -> dict[str, str]:
    # No PYTHONPATH: the checkout must not be importable in the installed copy's processes.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DMLBENCH_PLUGINS")}
    return {**env, **extra}


@pytest.mark.slow
def test_wheel_installed_outside_the_checkout_lists_protocols_and_runs_smoke(
    tmp_path: Path, cache_dir: Path
) -> None:
    bin_dir = build_and_install(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = _clean_env(DMLBENCH_CACHE=str(cache_dir))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=work, timeout=1800)

    where = run(str(bin_dir / "python"), "-c", "import benchmark; print(benchmark.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv")  # not the checkout's copy
    listed = run(str(bin_dir / "dmlbench"), "list", "protocols")
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert names == set(protocol_names(REPO / "protocols")) and "mlrc" in names
    assert str(tmp_path / "venv") in listed.stdout  # the packaged files, not the checkout's
    smoke = run(str(bin_dir / "dmlbench"), "run", "--budget", "smoke", "--loss", "contrastive", "--quiet")
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    record = json.loads((work / "results/glyphs/mlrc/records/contrastive.smoke.seed0.json").read_text())
    assert record["protocol"] == "mlrc" and record["budget"] == "smoke"
    assert (work / "results/glyphs/mlrc/leaderboard.md").is_file()
