"""Bad input: every case exits with code 2 before any compute, says what is wrong and what is valid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.cli.list_cmd import KINDS as LIST_KINDS
from benchmark.cli.main import main
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest

REPO = Path(__file__).resolve().parent.parent


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
    "protocol given as a path": (
        ["--loss", "mfcont", "--protocol", "../../x"],
        ["Invalid protocol name '../../x'", "used in file paths"],
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
    # Issue 14 §1: inputs that ended in a traceback (exit 1), most of them after loading the data.
    "negative lr": (["--loss", "mfcont", "--set", "train.lr=-1"], ["train.lr must be > 0, got -1.0"]),
    "nan lr": (
        ["--loss", "mfcont", "--set", "train.lr=nan"],
        ["'train.lr' must be a finite number, got nan"],
    ),
    "overflowing lr": (
        ["--loss", "mfcont", "--set", "train.lr=1e400"],
        ["'train.lr' must be a finite number, got inf", "overflows to inf"],
    ),
    "negative weight decay": (
        ["--loss", "mfcont", "--set", "train.weight_decay=-5"],
        ["train.weight_decay must be >= 0, got -5.0"],
    ),
    "negative seed": (["--loss", "mfcont", "--seed", "-1"], ["--seed must be >= 0", "got -1"]),
    "unknown device": (
        ["--loss", "mfcont", "--device", "bogus"],
        ["Unknown --device 'bogus'", "cuda:N", "mps"],
    ),
    "weights file is not a checkpoint": (
        ["--loss", "mfcont", "--trunk-weights", "{tmp}/notes.pth", "--set", "model.pretrained=true"],
        ["{tmp}/notes.pth is not a PyTorch checkpoint", "torch.save"],
    ),
    # /sys: no process, root included, can create files there (a read-only folder on any Linux).
    "read-only --out": (
        ["--loss", "mfcont", "--out", "/sys/dmlbench-runs"],
        ["--out /sys/dmlbench-runs cannot be created: /sys is not writable"],
    ),
    "read-only --results-dir": (
        ["--loss", "mfcont", "--results-dir", "/sys/dmlbench-results"],
        ["--results-dir /sys/dmlbench-results", "not writable"],
    ),
    "--out is a file": (["--loss", "mfcont", "--out", "{tmp}/notes.pth/runs"], ["is not a directory"]),
    # Issue 14 §2: inputs that were accepted although no meaningful result can come out.
    "zero lr": (["--loss", "mfcont", "--set", "train.lr=0"], ["train.lr must be > 0, got 0.0"]),
    "negative jobs": (["--loss", "mfcont", "--jobs", "-1"], ["--jobs must be >= 1, or 0", "got -1"]),
    "one image per class": (
        ["--loss", "mfcont", "--set", "data.max_per_class=1"],
        ["data.max_per_class = 1", "no query would have a positive"],
    ),
    "classes with one image each": (
        ["--loss", "mfcont", "--dataset", "folder", "--data-dir", "{tmp}/singletons"],
        ["'folder'", "no class with at least 2 images", "0 of the dataset's 16 classes have 2 or more"],
    ),
    "negative max_classes": (
        ["--loss", "mfcont", "--set", "data.max_classes=-3"],
        ["data.max_classes must be >= 0 (0 = no limit), got -3"],
    ),
    "weights without pretrained": (
        ["--loss", "mfcont", "--trunk-weights", "{tmp}/notes.pth"],
        ["model.pretrained = false", "--set model.pretrained=true", "leave out --trunk-weights"],
    ),
    # The built-in name reaches the config as a name, not as a path under the current directory.
    "built-in weights without pretrained": (
        ["--loss", "mfcont", "--trunk-weights", "builtin:smallcnn-symbols"],
        ["model.trunk_weights = 'builtin:smallcnn-symbols' was given", "model.pretrained = false"],
    ),
    "absurd number of trials": (
        ["--loss", "mfcont", "--set", "search.n_trials=1000000000000000000000"],
        ["search.n_trials = 1000000000000000000000", "at most 1,000,000"],
    ),
    "absurd number of reps": (["--loss", "mfcont", "--set", "test.reps=10000000"], ["test.reps = 10000000"]),
    "absurd number of epochs": (
        ["--loss", "mfcont", "--set", "train.max_epochs=10000000"],
        ["train.max_epochs = 10000000"],
    ),
}


def _bad_files(tmp: Path) -> None:
    """The files some cases point at: a text file named like weights, a dataset of singleton classes."""
    from PIL import Image

    (tmp / "notes.pth").write_text("these are not weights\n")
    for c in range(16):  # enough classes for the 4-fold split, but one image each
        folder = tmp / "singletons" / f"class{c:02d}"
        folder.mkdir(parents=True)
        Image.new("L", (28, 28), color=c * 10).save(folder / "only.png")


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_an_actionable_message(
    case: str, tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra, fragments = CASES[case]
    _bad_files(tmp_path)
    out = tmp_path / "runs"
    code, err = run_cli(
        [
            "run",
            "--budget",
            "smoke",
            "--quiet",
            "--out",
            str(out),
            "--results-dir",
            str(tmp_path / "res"),
            # After the defaults above: a case's own --out / --results-dir wins (argparse keeps the last).
            *[arg.replace("{tmp}", str(tmp_path)) for arg in extra],
        ],
        capsys,
    )
    assert code == 2, err
    assert err.startswith("\ndmlbench: error: ") and "Traceback" not in err
    for fragment in fragments:
        fragment = fragment.replace("{tmp}", str(tmp_path))
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


def test_corrupt_record_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two committed records of one leaderboard (omniglot/mlrc holds three).
    records = tmp_path / "omniglot" / "mlrc" / "records"
    records.mkdir(parents=True)
    committed = sorted((REPO / "results" / "omniglot" / "mlrc" / "records").glob("*.json"))
    good, damaged = committed[0], committed[1]
    shutil.copy(good, records / good.name)
    # A record truncated half-way (e.g. a full disk): a JSONDecodeError before this fix.
    text = damaged.read_text(encoding="utf-8")
    (records / damaged.name).write_text(text[: len(text) // 2], encoding="utf-8")
    code = main(["report", "--results-dir", str(tmp_path), "--dataset", "omniglot"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"skipping unreadable record {records / damaged.name}" in captured.err
    # The intact record is still reported.
    assert f"| {json.loads(good.read_text())['loss_display_name']} |" in captured.out


def test_one_broken_protocol_file_only_breaks_that_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import benchmark.config

    for path in benchmark.config.PROTOCOLS_DIR.glob("*.toml"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "mine.toml").write_text("[protocol\nname = 'mlrc'\n")
    monkeypatch.setattr(benchmark.config, "PROTOCOLS_DIR", tmp_path)
    assert main(["list", "protocols"]) == 0
    out = capsys.readouterr().out
    assert "mine         BROKEN: Protocol file" in out and "mlrc " in out and "cbir " in out
    code, err = run_cli(["run", "--protocol", "mine", "--loss", "mfcont"], capsys)
    assert code == 2 and f"Protocol file {tmp_path / 'mine.toml'} is not valid TOML" in err
    # Another protocol still resolves: the error is the next mistake on the command line.
    code, err = run_cli(["run", "--protocol", "mlrc", "--loss", "mfcnt"], capsys)
    assert code == 2 and "Unknown loss 'mfcnt'" in err
    code, err = run_cli(["run", "--protocol", "mlcr", "--loss", "mfcont"], capsys)
    assert code == 2 and "Unknown protocol 'mlcr'. Did you mean 'mlrc'?" in err


def test_a_protocol_file_of_unknown_kind_only_breaks_that_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import benchmark.config

    for path in benchmark.config.PROTOCOLS_DIR.glob("*.toml"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "weird.toml").write_text("[protocol]\nname = 'weird'\n")
    monkeypatch.setattr(benchmark.config, "PROTOCOLS_DIR", tmp_path)
    out = ["--out", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "res")]
    # mlrc resolves its whole config (every protocol's own keys are read) and stops at the next mistake.
    code, err = run_cli(["run", "--loss", "mfcont", *out, "--set", "train.batch_size=0"], capsys)
    assert code == 2 and "train.batch_size must be >= 1, got 0" in err, err
    code, err = run_cli(["run", "--protocol", "weird", "--loss", "mfcont", *out], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"Protocol file {tmp_path / 'weird.toml'}: [protocol] name = 'weird' is not a protocol kind" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--protocol", "../../x"], "Invalid protocol name '../../x'"),
        (["--dataset", "../omniglot"], "Invalid dataset name '../omniglot'"),
        (["--dataset", "omniglot", "--protocol", "/etc/x"], "Invalid protocol name '/etc/x'"),
    ],
)
def test_report_refuses_paths_as_names(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A record outside --results-dir that a path name would reach.
    outside = tmp_path / "x" / "records"
    outside.mkdir(parents=True)
    code, err = run_cli(["report", "--results-dir", str(tmp_path / "res" / "deep"), *flags], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_validation_fold_without_positives_is_refused() -> None:
    from benchmark.data.splits import check_queries_have_positives
    from benchmark.errors import DataError

    labels = [0, 0, 1, 1, 2, 3]  # classes 2 and 3 have one image each
    check_queries_have_positives(labels, {"test": [0, 2], "fold 0 validation": [1]}, "toy")
    with pytest.raises(DataError, match=r"the test set has no class with at least 2 images \(0 of its 2"):
        check_queries_have_positives(labels, {"test": [2, 3], "fold 0 validation": [1]}, "toy")


# Issue 14 §3: commands that must answer without importing the heavy libraries.
HEAVY = ("torch", "faiss", "optuna", "pandas", "matplotlib")
_WRAPPER = """
import sys
from benchmark.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # argparse: --help and usage errors
    code = exc.code
print("IMPORTED=" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""
LIGHT_COMMANDS = {
    "--help": (["--help"], 0),
    **{f"list {kind}": (["list", kind], 0) for kind in LIST_KINDS},
    "run --help": (["run", "--help"], 0),
    "usage error": (["run", "--loss", "mfcont", "--seed", "abc"], 2),
    "unknown loss": (["run", "--loss", "mfcnt"], 2),
    "unknown config key": (["run", "--loss", "mfcont", "--set", "train.lrr=1"], 2),
    "bad value": (["run", "--loss", "mfcont", "--set", "train.lr=-1"], 2),
    "unknown kNN search": (["run", "--loss", "mfcont", "--set", "eval.knn=annoy"], 2),
    "bad device": (["run", "--loss", "mfcont", "--device", "bogus"], 2),
    "report without records": (["report", "--results-dir", "/nonexistent"], 2),
    "no data dir": (["run", "--loss", "ms", "--dataset", "omniglot"], 2),
    # Counts out of range: checked before torch is imported (they were reported after it).
    **{
        f"bad count {key} ({budget})": (
            ["run", "--loss", "ms", "--budget", budget, "--set", f"{key}={value}"],
            2,
        )
        for key, value in (
            ("train.batch_size", 0),
            ("train.max_epochs", 0),
            ("data.image_size", 0),
            ("model.embedding_dim", 0),
            ("test.reps", 0),
            ("train.patience", -1),
        )
        for budget in ("smoke", "mini")
    },
}


@pytest.mark.parametrize("name", sorted(LIGHT_COMMANDS))
def test_help_list_and_argument_errors_do_not_import_torch(name: str, tmp_path: Path) -> None:
    args, expected_code = LIGHT_COMMANDS[name]
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        # Without the plugins an earlier test in this process registered (the registry exports them
        # to child processes through this variable; loading them would import torch).
        env={
            **{k: v for k, v in os.environ.items() if k != "DMLBENCH_PLUGINS"},
            "DMLBENCH_CACHE": str(tmp_path),
        },
        cwd=tmp_path,  # run/report resolve their default output folders here
        timeout=300,
    )
    assert proc.returncode == expected_code, proc.stderr
    imported = proc.stderr.strip().splitlines()[-1]
    assert imported == "IMPORTED=", f"{name}: {imported} (stderr: {proc.stderr[-2000:]})"
