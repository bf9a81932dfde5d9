"""Every registered loss completes an MLRC run (smoke budget, cut further to stay cheap)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmark.losses import LOSSES
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest

TINY = {
    "search.n_trials": 1,
    "search.n_startup_trials": 1,
    "train.iters_per_epoch": 3,
    "train.max_epochs": 1,
}


@pytest.mark.parametrize("loss", LOSSES.names())
def test_loss_completes_a_smoke_run(loss: str, tmp_path: Path, cache_dir: Path) -> None:
    request = RunRequest(
        loss=loss,
        budget="smoke",
        overrides=TINY,
        out=tmp_path / "runs",
        results_dir=tmp_path / "res",
        jobs=1,
        quiet=True,
    )
    record = MLRCRun(request).run().record
    assert record["search"]["trials"][0]["state"] == "COMPLETE", record["search"]["trials"][0]["failure"]
    for mode in ("separated", "concatenated"):
        values = record["test"]["per_rep"][mode]["map_at_r"]
        assert len(values) == 2 and all(0.0 <= v <= 1.0 and not math.isnan(v) for v in values)
    assert record["embedding_space"] == LOSSES.get(loss).embedding_space
