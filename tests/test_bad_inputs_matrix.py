"""Every case of ``benchmarks/bad_inputs.py`` gives what its row promises (issues 14 and 31).

Parametrized over the script's own :data:`CASES`, run by its own :func:`run_in_fresh_folder`-style
steps, so the matrix that reports times and these tests cannot drift apart: each case's exact input
exits with its code (2 for an error), its message names the problem, nothing is a traceback, a
case marked torch-free answered without importing torch, and no file under the case's folder
changed. Wall times are printed by the script, never asserted here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load_matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bad_inputs", REPO / "benchmarks" / "bad_inputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bad_inputs"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


MATRIX = _load_matrix()


def _snapshot(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_case_names_are_unique() -> None:
    names = [case.name for case in MATRIX.CASES]
    assert len(names) == len(set(names))


@pytest.mark.slow
@pytest.mark.parametrize("case", MATRIX.CASES, ids=[case.name for case in MATRIX.CASES])
def test_bad_input_gives_what_the_matrix_promises(case: Any, tmp_path: Path) -> None:
    work = tmp_path / "case"
    work.mkdir()
    MATRIX.prepare(work, REPO)
    code = MATRIX.broken_copy(REPO, work, case.broken) if case.broken else REPO
    before = _snapshot(work)
    result = MATRIX.run_case(case, code, work, 300.0, tmp_path / "cache")
    output = result["stderr"] + result["stdout"]
    assert result["exit"] == case.exit, output
    assert not result["traceback"] and "Traceback" not in output, output
    if case.exit == 2:
        assert "dmlbench: error: " in result["stderr"], output
    for fragment in case.fragments:
        fragment = fragment.replace("{tmp}", str(work))
        assert fragment in output, f"{fragment!r} missing from: {output}"
    for fragment in case.absent:
        assert fragment not in output, output
    if case.torch_free:
        assert result["imported"] == "-", f"torch was imported before the answer: {output}"
    # Nothing written or changed: the run and results folders hold no file, every prepared file is intact.
    after = _snapshot(work)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))


def test_matrix_runs_its_cases_without_plugins_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin another test registered (DMLBENCH_PLUGINS) would import torch in the child."""
    monkeypatch.setenv("DMLBENCH_PLUGINS", "loss=nowhere:X")
    case = next(c for c in MATRIX.CASES if c.name == "train.batch_size=0")
    work = tmp_path / "case"
    work.mkdir()
    result = MATRIX.run_case(case, REPO, work, 300.0, tmp_path / "cache")
    assert result["exit"] == 2 and result["imported"] == "-", result["stderr"]
    assert os.environ["DMLBENCH_PLUGINS"] == "loss=nowhere:X"
