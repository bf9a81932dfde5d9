"""Shared fixtures: a per-session dataset cache and paths to the real Omniglot data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
OMNIGLOT = REPO.parent / "shared" / "data" / "omniglot"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dataset cache shared by the whole test session (glyphs are rendered once)."""
    path = Path(os.environ.get("DMLBENCH_TEST_CACHE", tmp_path_factory.mktemp("cache")))
    os.environ["DMLBENCH_CACHE"] = str(path)
    return path
