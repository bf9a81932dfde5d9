"""A loss that becomes NaN fails its trial with the reason; the study goes on to the configured count."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import benchmark.engine.train as train_module
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest


class NaNLoss(nn.Module):
    """Wraps a loss so that it returns NaN (a diverged training); also used by other tests."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(emb, labels)
        return out * float("nan")


def test_nan_loss_fails_the_trial_and_the_study_continues(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_build = train_module.build_loss
    calls = {"n": 0}

    def build(name: str, ctx: Any, params: Mapping[str, float]) -> nn.Module:
        calls["n"] += 1
        loss = real_build(name, ctx, params)
        return NaNLoss(loss) if calls["n"] == 1 else loss  # the first fold of the first trial

    monkeypatch.setattr(train_module, "build_loss", build)
    request = RunRequest(
        loss="mfcont",
        budget="smoke",
        out=tmp_path / "runs",
        results_dir=tmp_path / "results",
        jobs=1,  # in-process, so the patched builder is used
        quiet=True,
    )
    result = MLRCRun(request).run()
    trials = result.record["search"]["trials"]
    # A diverged trial counts towards the budget (MLRC scored it), so 3 trials = 1 failed + 2 complete.
    assert [t["state"] for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert "loss became nan" in trials[0]["failure"] and "fold 0" in trials[0]["failure"]
    assert not trials[0]["interrupted"]
    assert result.record["search"]["best_trial"] != 0
    assert len(result.record["test"]["per_rep"]["separated"]["map_at_r"]) == 2
    # The diverged fold counts in the search stage's stops; the smoke budget is labelled exempt.
    convergence = result.record["convergence"]
    assert convergence["search"]["counts"].get("diverged") == 1
    assert convergence["search"]["n"] == 4 * len(trials)
    assert convergence["test"]["n"] == 2 * 4 and convergence["verdict"] == "exempt"
    stops = [f["stopped_by"] for rep in result.record["test"]["rep_details"] for f in rep["folds"]]
    assert set(stops) <= {"patience", "max_epochs"} and len(stops) == 8
