"""Shared fixtures: a per-session dataset cache and paths to the real Omniglot data; slow tests
first when the suite runs in parallel (pytest-xdist)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from benchmark.config import PROTOCOL_PATH_VAR
from benchmark.registry import ENV_VAR

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
OMNIGLOT = REPO.parent / "shared" / "data" / "omniglot"

#: ``python -c CLI_DRIVER ARGS`` runs the command line in a fresh process and reports on stderr
#: whether torch was imported (``TORCH_IMPORTED=True|False``).
CLI_DRIVER = """
import sys
from benchmark.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    print("TORCH_IMPORTED=" + str("torch" in sys.modules), file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture(autouse=True)
def _restore_exported_settings() -> Iterator[None]:
    """Put back the variables that registering a plugin or a protocol file exports for spawned
    workers: a test that registers one must not hand it to a later test's subprocesses (a leaked
    ``DMLBENCH_PLUGINS`` made ``dmlbench list losses`` fail on a module that no longer exists)."""
    saved = {var: os.environ.get(var) for var in (ENV_VAR, PROTOCOL_PATH_VAR)}
    yield
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dataset cache shared by the whole test session (glyphs are rendered once)."""
    path = Path(os.environ.get("DMLBENCH_TEST_CACHE", tmp_path_factory.mktemp("cache")))
    os.environ["DMLBENCH_CACHE"] = str(path)
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, start the ``slow`` tests (minutes each) first.

    xdist hands out tests in collection order; a long test collected last would run alone at the
    end while the other workers idle. Every worker sorts the same way (a stable sort), as xdist
    requires; a serial run keeps the collection order.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def load_benchmark_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name`` (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def page_signed(x: float) -> str:
    """The pages' signed number with two decimals, written independently of
    ``benchmark.report.numbers``: an explicit sign, U+2212 for minus."""
    return f"{x:+.2f}".replace("-", "\u2212")


def committed_checkout(root: Path, files: dict[str, str]) -> None:
    """A git repository at ``root`` holding ``files`` (relative path -> text) in one commit."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    commit = ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    for args in (("init", "-q"), ("add", "."), commit):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
