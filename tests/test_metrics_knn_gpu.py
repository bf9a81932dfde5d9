"""GPU search switch of the exact k-NN: chosen only with faiss-gpu and a GPU, long lists on the CPU.

No GPU here: a stand-in for faiss's GPU functions (a GPU "copy" that is the CPU index, recording
the list lengths it served) checks the routing; the real GPU search is faiss's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import faiss
import numpy as np
import pytest
from test_metrics_reference import lattice_points, naive_ranking

from benchmark.metrics import knn
from benchmark.metrics.knn import FlatIndex, faiss_gpu_count, gpu_search_enabled, use_gpu_search

knn_module = importlib.import_module("benchmark.metrics.knn")


class RecordingIndex:
    """Serves searches from a CPU index and records each list length (the fake GPU copy)."""

    def __init__(self, cpu: faiss.Index) -> None:
        self.cpu = cpu
        self.lengths: list[int] = []

    def search(self, queries: np.ndarray, m: int) -> Any:
        self.lengths.append(m)
        return self.cpu.search(queries, m)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RecordingIndex]]:
    copies: list[RecordingIndex] = []

    def to_gpu(resources: object, device: int, index: faiss.Index) -> RecordingIndex:
        assert device == 0 and resources is not None
        copies.append(RecordingIndex(index))
        return copies[-1]

    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(knn_module, "_gpu", knn_module._GpuSearch())
    yield copies
    use_gpu_search(False)


def test_no_gpu_search_without_faiss_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(knn_module, "_gpu", knn_module._GpuSearch())
    if faiss_gpu_count() > 0:
        pytest.skip("this machine has faiss-gpu and a GPU")
    assert use_gpu_search(True) is False and not gpu_search_enabled()
    assert FlatIndex(faiss.IndexFlatL2(2)).gpu is None


def test_gpu_switch_follows_the_request(fake_gpu: list[RecordingIndex]) -> None:
    assert use_gpu_search(False) is False and FlatIndex(faiss.IndexFlatL2(2)).gpu is None
    assert use_gpu_search(True) is True and gpu_search_enabled()
    assert isinstance(FlatIndex(faiss.IndexFlatL2(2)).gpu, RecordingIndex)


@pytest.mark.parametrize("space", ["cosine", "euclidean"])
def test_long_tie_lists_fall_back_to_the_cpu_index(
    space: str, fake_gpu: list[RecordingIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many exact ties force lists longer than the GPU limit (lowered here to 8) while a tie at
    # the cut-off is resolved: those searches must go to the CPU copy, and the result must stay
    # the exact ranking.
    monkeypatch.setattr(knn_module, "GPU_MAX_K", 8)
    requested: list[int] = []
    search = FlatIndex.search

    def spy(self: FlatIndex, queries: np.ndarray, m: int) -> Any:
        requested.append(m)
        return search(self, queries, m)

    monkeypatch.setattr(FlatIndex, "search", spy)
    use_gpu_search(True)
    x = lattice_points(200, space, seed=1)
    got = knn(x, 5, space)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, naive_ranking(x, space)[:, :5])
    assert len(fake_gpu) == 1
    on_gpu = fake_gpu[0].lengths
    assert on_gpu == [m for m in requested if m <= 8]  # every short list went to the GPU copy
    assert any(m > 8 for m in requested)  # and the long ones (ties) to the CPU index
