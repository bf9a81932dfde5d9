"""Bad input: every case exits with code 2 before any compute, says what is wrong and what is valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.cli.main import main
from benchmark.protocol.runner import MLRCRun, RunRequest


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


# (extra arguments, fragments the message must contain)
CASES = {
    "unknown loss": (["--loss", "mfcnt"], ["Unknown loss 'mfcnt'", "Did you mean 'mfcont'", "proxyanchor"]),
    "unknown dataset": (
        ["--loss", "mfcont", "--dataset", "omniglott"],
        ["Unknown dataset 'omniglott'", "Did you mean 'omniglot'", "glyphs"],
    ),
    "unknown protocol": (
        ["--loss", "mfcont", "--protocol", "mlcr"],
        ["Unknown protocol 'mlcr'", "Did you mean 'mlrc'", "Valid choices: "],
    ),
    "unknown budget": (
        ["--loss", "mfcont", "--budget", "minii"],
        ["Unknown budget 'minii'", "Did you mean 'mini'", "paper, mini, smoke"],
    ),
    "unknown sampler": (["--loss", "mfcont", "--sampler", "gpp"], ["Unknown sampler 'gpp'", "tpe"]),
    "unknown config key": (
        ["--loss", "mfcont", "--set", "train.lrr=1e-3"],
        ["Unknown config key 'train.lrr'", "Did you mean 'train.lr'", "Valid keys there: "],
    ),
    "unknown section": (["--loss", "mfcont", "--set", "trian.lr=1e-3"], ["'trian'"]),
    "wrong type": (["--loss", "mfcont", "--set", "train.lr=fast"], ["'train.lr' must be a number", "'fast'"]),
    "unknown loss hyperparameter": (
        ["--loss", "mfcont", "--set", "loss.margin=0.1"],
        ["Unknown loss.margin for loss 'mfcont'", "m_p, m_n, lambda_mf"],
    ),
    "bad search range": (
        ["--loss", "mfcont", "--set", "space.mfcont.param_lr=[1.0, 0.1]"],
        ["space.mfcont.param_lr must be [low, high] with low < high", "[1.0, 0.1]"],
    ),
    "missing data dir": (
        ["--loss", "mfcont", "--dataset", "omniglot", "--data-dir", "/nonexistent/omniglot"],
        ["/nonexistent/omniglot", "images_background", "omniglot-py"],
    ),
    "data dir not given": (["--loss", "mfcont", "--dataset", "omniglot"], ["--data-dir"]),
    "missing standard dataset": (
        ["--loss", "mfcont", "--dataset", "cub200", "--data-dir", "/nonexistent/cub"],
        ["/nonexistent/cub", "images.txt"],
    ),
    "pretrained without weights": (
        ["--loss", "mfcont", "--budget", "paper"],
        ["model.pretrained = true", "bninception", "--trunk-weights PATH"],
    ),
    "weights file missing": (
        ["--loss", "mfcont", "--trunk-weights", "/nonexistent/bn.pth", "--set", "model.pretrained=true"],
        ["no such file", "/nonexistent/bn.pth"],
    ),
    "unknown timm model": (
        ["--loss", "mfcont", "--set", "model.trunk=timm:resnet10tt"],
        ["timm has no model 'resnet10tt'", "resnet10t"],
    ),
    "too few classes for 4 folds": (
        ["--loss", "mfcont", "--set", "data.max_classes=5"],
        ["has 5 classes", "needs at least 8"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_an_actionable_message(
    case: str, tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra, fragments = CASES[case]
    out = tmp_path / "runs"
    code, err = run_cli(
        [
            "run",
            "--budget",
            "smoke",
            *extra,
            "--quiet",
            "--out",
            str(out),
            "--results-dir",
            str(tmp_path / "res"),
        ],
        capsys,
    )
    assert code == 2, err
    assert err.startswith("\ndmlbench: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} missing from: {err}"
    # Nothing was computed or written: the error came before the run directory existed.
    assert not out.exists() or not any(out.rglob("*"))


def test_run_dir_of_another_configuration_is_refused(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    run = MLRCRun(RunRequest(loss="contrastive", budget="smoke", out=out, quiet=True, jobs=1))
    run.resolve()
    run.load_data()
    run.split()
    run.prepare_run_dir()
    run.executor.close()
    ident = run.run_dir / "run.json"
    data = json.loads(ident.read_text())
    # E.g. a run directory copied from elsewhere, or written by an older version with other settings.
    data["config"]["train"]["lr"] = 0.5
    ident.write_text(json.dumps(data))
    code, err = run_cli(
        ["run", "--loss", "contrastive", "--budget", "smoke", "--quiet", "--jobs", "1", "--out", str(out)],
        capsys,
    )
    assert code == 2
    assert "belongs to a different configuration" in err and "config.train.lr" in err
    assert not (run.run_dir / "study.journal").exists()


def test_pretrained_weights_come_from_the_torch_hub_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from benchmark.errors import ConfigError
    from benchmark.models.trunks import build_model

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    request = RunRequest(
        loss="contrastive",
        budget="smoke",
        quiet=True,
        overrides={"model.trunk": "resnet18", "model.pretrained": True},
    )
    # Not in the cache: an error naming the file and where it was looked for, never a download.
    with pytest.raises(ConfigError, match=r"resnet18-f37072fd\.pth is in .*torch/hub/checkpoints"):
        MLRCRun(request).resolve()
    # In the cache (where torchvision puts its download): used, and recorded in the config.
    weights = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    weights.parent.mkdir(parents=True)
    torch.save(
        build_model("resnet18", 3, 8, pretrained=False, weights_path="", seed=5).trunk.state_dict(), weights
    )
    run = MLRCRun(request)
    run.resolve()
    assert run.config.model.trunk_weights == str(weights)
    # An explicit --trunk-weights file wins over the cache.
    other = tmp_path / "mine.pth"
    other.write_bytes(weights.read_bytes())
    explicit = MLRCRun(
        RunRequest(
            loss="contrastive",
            budget="smoke",
            quiet=True,
            overrides={**request.overrides, "model.trunk_weights": str(other)},
        )
    )
    explicit.resolve()
    assert explicit.config.model.trunk_weights == str(other)
