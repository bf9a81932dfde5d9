"""The built-in protocols own their settings (issue 29): cbir's split and traditional's class cut
and loop options are ``[settings]`` blocks declared by their ``ProtocolSpec``, as a plugin
protocol's are, not keys of the closed ``RunConfig``.

Checked here: the settings resolve from every layer (declared defaults, the protocol file, a
dataset's paper values, a budget's overrides, ``--set``) and a changed one is a deviation named
``settings.KEY``; an old spelling says where the key went; a setting of another protocol is refused
before torch is imported; committed records, leaderboards and regression baselines are unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
from conftest import CLI_DRIVER

from benchmark.config import (
    PROTOCOL_PATH_VAR,
    RunConfig,
    config_from_mapping,
    config_to_dict,
    deviations,
    flatten,
    load_protocol_file,
)
from benchmark.errors import ConfigError
from benchmark.moved_keys import MOVED_KEYS, current_layout
from benchmark.protocol.cbir import CBIRSettings
from benchmark.protocol.registry import (
    budget_overrides,
    protocol_spec,
    resolve_run_config,
    setting_names,
)
from benchmark.protocol.request import RunRequest, dataset_paper_settings, request_layers
from benchmark.protocol.traditional import TraditionalSettings
from benchmark.records import replicate_key

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"

TRADITIONAL_PAPER = {
    "train_classes": 0,
    "warmup_epochs": 1,
    "lr_decay_step": 10,
    "lr_decay_gamma": 0.5,
    "clip_grad_value": 10.0,
}


def _resolve(
    protocol: str, budget: str = "paper", dataset: str = "glyphs", user: dict[str, Any] | None = None
) -> tuple[RunConfig, RunConfig]:
    request = RunRequest(
        loss="contrastive", protocol=protocol, budget=budget, dataset=dataset, overrides=user or {}
    )
    return resolve_run_config(*request_layers(request), dataset_paper_settings)


def _devs(resolved: RunConfig, paper: RunConfig) -> dict[str, tuple[Any, Any]]:
    return {d.key: (d.paper, d.value) for d in deviations(resolved, paper)}


# -- the settings resolve from every layer ------------------------------------------------------------


def test_declared_settings_and_their_defaults() -> None:
    assert protocol_spec("cbir").settings is CBIRSettings
    assert protocol_spec("traditional").settings is TraditionalSettings
    assert protocol_spec("mlrc").settings is None
    assert dataclasses.asdict(CBIRSettings()) == {"query_fraction": 0.25, "split_seed": 0}
    # Each default is "off": a half/half split and MLRC's loop.
    assert dataclasses.asdict(TraditionalSettings()) == {
        "train_classes": 0,
        "warmup_epochs": 0,
        "lr_decay_step": 0,
        "lr_decay_gamma": 1.0,
        "clip_grad_value": 0.0,
    }
    # A key left out of the file takes the declared default, and the record still names it.
    data = load_protocol_file("traditional")
    data["settings"] = {k: v for k, v in data["settings"].items() if k != "clip_grad_value"}
    resolved, _ = resolve_run_config(data, {}, {})
    assert resolved.settings == {**TRADITIONAL_PAPER, "clip_grad_value": 0.0}


def test_moved_keys_are_the_owners_settings_at_their_former_defaults() -> None:
    for key, moved in MOVED_KEYS.items():
        spec = protocol_spec(moved.protocol)
        assert moved.setting in setting_names(spec), key
        assert getattr(spec.settings(), moved.setting) == moved.neutral, key  # type: ignore[misc]


@pytest.mark.parametrize(
    ("protocol", "settings"),
    [("cbir", {"query_fraction": 0.25, "split_seed": 0}), ("traditional", TRADITIONAL_PAPER)],
)
def test_the_protocol_files_settings_block(protocol: str, settings: dict[str, Any]) -> None:
    with (REPO / "protocols" / f"{protocol}.toml").open("rb") as fh:
        raw = tomllib.load(fh)
    assert raw["settings"] == settings
    assert not set(raw["protocol"]) & {"query_fraction", "split_seed", "train_classes"}
    assert not set(raw["train"]) & {"warmup_epochs", "lr_decay_step", "lr_decay_gamma", "clip_grad_value"}
    resolved, paper = _resolve(protocol)
    assert resolved.settings == paper.settings == settings
    assert deviations(resolved, paper) == []
    assert config_to_dict(resolved)["settings"] == settings  # what the record holds


def test_mlrc_configs_carry_no_other_protocols_keys() -> None:
    for budget in ("paper", "mini", "smoke"):
        resolved, _ = _resolve("mlrc", budget)
        keys = set(flatten(config_to_dict(resolved)))
        assert not keys & set(MOVED_KEYS) and not any(k.startswith("settings") for k in keys), budget
        assert "settings" not in config_to_dict(resolved)


@pytest.mark.parametrize(
    ("dataset", "settings", "lr"),
    [
        ("cub200", TRADITIONAL_PAPER, 1e-4),
        ("cars196", {**TRADITIONAL_PAPER, "lr_decay_step": 20}, 1e-4),
        (
            "sop",
            {**TRADITIONAL_PAPER, "train_classes": 11318, "lr_decay_step": 20, "lr_decay_gamma": 0.25},
            6e-4,
        ),
        ("inshop", {**TRADITIONAL_PAPER, "lr_decay_step": 20, "lr_decay_gamma": 0.25}, 6e-4),
    ],
)
def test_datasets_paper_settings_target_the_settings_block(
    dataset: str, settings: dict[str, Any], lr: float
) -> None:
    resolved, paper = _resolve("traditional", dataset=dataset)
    assert resolved.settings == settings and resolved.train.lr == lr
    assert deviations(resolved, paper) == []  # the dataset's values are its paper configuration
    declared = dataset_paper_settings(dataset, "traditional")
    assert not set(declared) & set(MOVED_KEYS)


def test_budget_overrides_target_the_settings_block() -> None:
    for budget in ("mini", "smoke"):
        overrides = budget_overrides(budget, "traditional")
        assert (overrides["settings.train_classes"], overrides["settings.warmup_epochs"]) == (0, 0)
        assert not set(overrides) & set(MOVED_KEYS)
        resolved, paper = _resolve("traditional", budget, dataset="sop")
        devs = _devs(resolved, paper)
        assert devs["settings.train_classes"] == (11318, 0)
        assert devs["settings.warmup_epochs"] == (1, 0)
        assert resolved.settings["clip_grad_value"] == 10.0  # kept from the authors' loop
        assert "settings.clip_grad_value" not in devs
    for budget in ("mini", "smoke"):
        resolved, paper = _resolve("cbir", budget)
        assert resolved.settings == {"query_fraction": 0.25, "split_seed": 0}
        assert not any(k.startswith("settings.") for k in _devs(resolved, paper))


@pytest.mark.parametrize(
    ("protocol", "key", "value", "paper"),
    [
        ("cbir", "query_fraction", 0.5, 0.25),
        ("cbir", "split_seed", 3, 0),
        ("traditional", "train_classes", 10, 0),
        ("traditional", "warmup_epochs", 0, 1),
        ("traditional", "lr_decay_step", 5, 10),
        ("traditional", "lr_decay_gamma", 0.1, 0.5),
        ("traditional", "clip_grad_value", 0.0, 10.0),
    ],
)
def test_a_changed_setting_is_a_deviation_named_settings_key(
    protocol: str, key: str, value: Any, paper: Any
) -> None:
    resolved, paper_config = _resolve(protocol, "smoke", user={f"settings.{key}": value})
    assert resolved.settings[key] == value
    assert _devs(resolved, paper_config)[f"settings.{key}"] == (paper, value)


@pytest.mark.parametrize(
    ("protocol", "key", "value", "message"),
    [
        ("cbir", "query_fraction", 1.5, "settings.query_fraction must lie in (0, 1), got 1.5."),
        ("cbir", "query_fraction", 0.0, "settings.query_fraction must lie in (0, 1), got 0.0."),
        ("cbir", "split_seed", -1, "settings.split_seed must be >= 0, got -1."),
        ("cbir", "split_seed", 0.5, "Config key 'settings.split_seed' must be an integer, got 0.5."),
        ("traditional", "train_classes", -1, "settings.train_classes must be >= 0 (0 = half of the classes)"),
        ("traditional", "warmup_epochs", -1, "settings.warmup_epochs must be >= 0, got -1."),
        ("traditional", "lr_decay_step", -2, "settings.lr_decay_step must be >= 0 (0 = no decay), got -2."),
        ("traditional", "lr_decay_gamma", 0.0, "settings.lr_decay_gamma must be in (0, 1], got 0.0."),
        ("traditional", "clip_grad_value", -1.0, "settings.clip_grad_value must be >= 0 (0 = no clipping)"),
        (
            "traditional",
            "warmup_epoch",
            1,
            "Unknown config key 'settings.warmup_epoch' in section [settings].",
        ),
    ],
)
def test_bad_setting_values_name_the_key(protocol: str, key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(protocol, "smoke", user={f"settings.{key}": value})
    assert message in str(info.value)


def test_the_runs_read_their_settings(tmp_path: Path) -> None:
    from benchmark.engine.training_options import LoopOptions
    from benchmark.protocol.cbir_run import CBIRRun
    from benchmark.protocol.traditional_run import TraditionalRun

    def request(protocol: str, **overrides: Any) -> RunRequest:
        return RunRequest(
            loss="contrastive",
            protocol=protocol,
            budget="smoke",
            overrides=overrides,
            out=tmp_path / "runs",
            results_dir=tmp_path / "res",
        )

    run = TraditionalRun(request("traditional", **{"settings.lr_decay_step": 5}))
    run.resolve()
    assert run.loop_options() == LoopOptions(
        warmup_epochs=0, lr_decay_step=5, lr_decay_gamma=0.5, clip_grad_value=10.0
    )
    cbir = CBIRRun(request("cbir", **{"settings.split_seed": 4}))
    cbir.resolve()
    assert cbir.split_settings() == CBIRSettings(query_fraction=0.25, split_seed=4)


# -- old spellings and other protocols' settings ------------------------------------------------------


@pytest.mark.parametrize("protocol", ["mlrc", "cbir", "traditional"])
@pytest.mark.parametrize("key", sorted(MOVED_KEYS))
def test_an_old_spelling_says_where_the_key_moved(protocol: str, key: str) -> None:
    moved = MOVED_KEYS[key]
    expected = f"Config key {key!r} is now 'settings.{moved.setting}' of the {moved.protocol!r} protocol"
    with pytest.raises(ConfigError) as info:
        _resolve(protocol, "smoke", user={key: moved.neutral})
    assert expected in str(info.value)
    assert f"--set settings.{moved.setting}=VALUE and --protocol {moved.protocol}" in str(info.value)


def test_an_old_spelling_in_a_protocol_file_says_where_the_key_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A protocol file of the earlier layout: the old traditional.toml's [train] warmup_epochs.
    old = (REPO / "protocols" / "traditional.toml").read_text(encoding="utf-8")
    old = old.replace("[train]\n", "[train]\nwarmup_epochs = 1\n", 1)
    (tmp_path / "oldtrad.toml").write_text(old, encoding="utf-8")
    monkeypatch.setenv(PROTOCOL_PATH_VAR, str(tmp_path))
    with pytest.raises(
        ConfigError, match=r"'train\.warmup_epochs' is now 'settings\.warmup_epochs' of the 'traditional'"
    ):
        resolve_run_config(load_protocol_file("oldtrad"), {}, {})


@pytest.mark.parametrize(
    ("protocol", "key", "owner"),
    [
        ("mlrc", "query_fraction", "cbir"),
        ("mlrc", "warmup_epochs", "traditional"),
        ("traditional", "split_seed", "cbir"),
        ("cbir", "train_classes", "traditional"),
    ],
)
def test_another_protocols_setting_is_refused_naming_its_owner(protocol: str, key: str, owner: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(protocol, "smoke", user={f"settings.{key}": 1})
    message = str(info.value)
    assert f"settings.{key} = 1 is a setting of the {owner!r} protocol" in message
    assert f"this run's protocol is {protocol!r}" in message and f"--protocol {owner}" in message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--set", "settings.query_fraction=0.5"),
            "settings.query_fraction = 0.5 is a setting of the 'cbir' protocol, but this run's protocol "
            "is 'mlrc'",
        ),
        (
            ("--set", "protocol.query_fraction=0.5"),
            "Config key 'protocol.query_fraction' is now 'settings.query_fraction' of the 'cbir' protocol",
        ),
        (
            ("--protocol", "traditional", "--set", "train.lr_decay_gamma=0.5"),
            "Config key 'train.lr_decay_gamma' is now 'settings.lr_decay_gamma' of the 'traditional' "
            "protocol",
        ),
        (
            ("--protocol", "cbir", "--set", "settings.query_fraction=1.5"),
            "settings.query_fraction must lie in (0, 1), got 1.5.",
        ),
    ],
)
def test_settings_errors_come_before_torch_is_imported(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    run = ["run", "--loss", "contrastive", "--budget", "smoke", "--quiet", "--out", str(tmp_path / "runs")]
    run += ["--results-dir", str(tmp_path / "res")]
    env = {**os.environ, "DMLBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", CLI_DRIVER, *run, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "TORCH_IMPORTED=False" in proc.stderr
    assert not (tmp_path / "runs").exists()


# -- committed records, leaderboards and baselines ---------------------------------------------------


def _committed_records() -> list[Path]:
    return sorted(RESULTS.glob("*/*/records/*.json")) + sorted(
        RESULTS.glob("sensitivity/*/*/*/records/*.json")
    )


def test_committed_record_configs_read_in_todays_layout() -> None:
    paths = _committed_records()
    assert len(paths) > 50
    for path in paths:
        config = json.loads(path.read_text(encoding="utf-8"))["config"]
        now = current_layout(config)
        # Valid for today's RunConfig, with no key that moved (mlrc's were at their neutral values).
        config_from_mapping(now)
        assert not set(flatten(now)) & set(MOVED_KEYS), path
        if config["protocol"]["name"] == "mlrc":
            assert "settings" not in now
            assert {k: v for k, v in flatten(config).items() if k not in MOVED_KEYS} == flatten(now)


def test_current_layout_moves_a_protocols_own_keys_and_keeps_real_differences() -> None:
    cbir: dict[str, Any] = {
        "protocol": {"name": "cbir", "query_fraction": 0.5, "split_seed": 0, "train_classes": 0},
        "train": {"lr": 1e-3, "warmup_epochs": 0, "clip_grad_value": 0.0},
    }
    assert current_layout(cbir) == {
        "protocol": {"name": "cbir"},
        "train": {"lr": 1e-3},
        "settings": {"query_fraction": 0.5, "split_seed": 0},
    }
    assert cbir["protocol"]["query_fraction"] == 0.5  # the argument is left as it was
    # An MLRC run that did set a loop option (possible before the move) stays a different config.
    mlrc = {"protocol": {"name": "mlrc", "query_fraction": 0.25}, "train": {"warmup_epochs": 2}}
    assert current_layout(mlrc) == {"protocol": {"name": "mlrc"}, "train": {"warmup_epochs": 2}}
    now = {"protocol": {"name": "cbir"}, "settings": {"query_fraction": 0.25, "split_seed": 0}}
    assert current_layout(now) == now


def _former_layout(config: dict[str, Any]) -> dict[str, Any]:
    """An MLRC ``config`` as runs wrote it before issue 29: every moved key at its neutral value."""
    out: dict[str, Any] = copy.deepcopy(current_layout(config))
    for key, moved in MOVED_KEYS.items():
        table, field = key.split(".")
        out.setdefault(table, {})[field] = moved.neutral
    return out


def test_a_record_in_todays_layout_is_a_replicate_of_a_committed_one() -> None:
    # A new seed's record (config written by today's code) folds with the seeds of its configuration
    # written before the move, and the reverse: the replicate key compares configs in today's
    # layout. Built from each committed record so that it holds whichever layout the boards are in.
    paths = sorted((RESULTS / "omniglot" / "mlrc" / "records").glob("*.json"))
    assert paths
    for path in paths:
        record = json.loads(path.read_text(encoding="utf-8"))
        now = {**record, "config": current_layout(record["config"])}
        before = {**record, "seed": 99, "config": _former_layout(record["config"])}
        assert before["config"] != now["config"]
        assert current_layout(now["config"]) == now["config"]
        assert replicate_key(before) == replicate_key(now) == replicate_key(record), path
        # A real difference in a moved key (an MLRC run that set one) is another configuration.
        changed = {**before, "config": copy.deepcopy(before["config"])}
        changed["config"]["train"]["warmup_epochs"] = 3
        assert replicate_key(changed) != replicate_key(now), path


@pytest.mark.parametrize("dataset", ["glyphs", "omniglot"])
@pytest.mark.parametrize("protocol", ["mlrc", "cbir", "traditional"])
@pytest.mark.parametrize("fmt", ["md", "json"])
def test_report_over_committed_records_reproduces_the_committed_leaderboard(
    dataset: str, protocol: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli.main import main

    shutil.copytree(RESULTS / dataset / protocol / "records", tmp_path / dataset / protocol / "records")
    args = ["report", "--dataset", dataset, "--protocol", protocol, "--results-dir", str(tmp_path)]
    assert main([*args, "--format", fmt]) == 0
    committed = (RESULTS / dataset / protocol / f"leaderboard.{fmt}").read_text(encoding="utf-8")
    assert capsys.readouterr().out == committed


def test_committed_regression_baselines_keep_their_identity() -> None:
    from benchmark.losses import LOSSES
    from benchmark.regress.baselines import load_baselines
    from benchmark.regress.cases import DEFAULT_BASELINES, load_suite
    from benchmark.regress.training import PreparedCase, case_config

    suite = load_suite()
    for case in suite.cases:
        config = case_config(case, suite.settings)
        assert "settings" not in config_to_dict(config)
        params = {k: float(v) for k, v in LOSSES.get(case.loss).defaults.items()}
        # The identity reads the config and the parameters only (no data is loaded here).
        prepared = PreparedCase(case, config, params, data=None, data_fingerprint="")  # type: ignore[arg-type]
        stored = load_baselines(DEFAULT_BASELINES, case.dataset)[case.loss]
        assert prepared.identity(suite.settings) == stored.identity, case.name
