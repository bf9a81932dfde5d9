"""Config strictness: bad keys and types fail before compute, naming the key."""

from __future__ import annotations

import pytest

from benchmark.budgets import BUDGETS
from benchmark.config import (
    NOT_DEVIATIONS,
    config_from_mapping,
    deviations,
    load_protocol_file,
    parse_set_option,
    protocol_kind,
    protocol_names,
    resolve_config,
)
from benchmark.errors import ConfigError, DmlbenchError, UnknownNameError
from benchmark.moved_keys import MOVED_KEYS
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.registry import resolve_run_config
from benchmark.protocol.request import RunRequest, preflight

PAPER = load_protocol_file("mlrc")


def test_protocol_file_is_valid_and_matches_spec() -> None:
    c = config_from_mapping(PAPER)
    assert (c.train.batch_size, c.train.iters_per_epoch, c.train.max_epochs) == (32, 100, 1000)
    assert (c.train.lr, c.train.weight_decay, c.train.momentum) == (1e-6, 1e-4, 0.9)
    assert (c.search.n_trials, c.search.n_startup_trials, c.search.sampler) == (50, 5, "gp")
    assert c.test.reps == 10 and c.model.embedding_dim == 128 and c.protocol.n_folds == 4


@pytest.mark.parametrize("budget", BUDGETS.names())
def test_every_budget_resolves(budget: str) -> None:
    resolved, paper = resolve_config(PAPER, BUDGETS.get(budget).overrides, {})
    devs = {d.key for d in deviations(resolved, paper)}
    # Keys that are never deviations (the weights file: mini's builtin:smallcnn-symbols) are left out.
    assert devs == set(BUDGETS.get(budget).overrides) - NOT_DEVIATIONS - {
        k for k, v in BUDGETS.get(budget).overrides.items() if _paper_value(k) == v
    }


def _paper_value(key: str) -> object:
    section, name = key.split(".")
    return PAPER.get(section, {}).get(name, object())


def test_paper_budget_has_no_deviations() -> None:
    resolved, paper = resolve_config(PAPER, {}, {})
    assert deviations(resolved, paper) == []


def test_dataset_and_paths_are_not_deviations_but_protocol_settings_are() -> None:
    user = {
        "data.dataset": "omniglot",
        "data.data_dir": "/x",
        "model.trunk_weights": "/w.pth",
        "train.lr": 1e-3,
    }
    resolved, paper = resolve_config(PAPER, {}, user)
    assert [d.key for d in deviations(resolved, paper)] == ["train.lr"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"train.lrr": 1e-3}, "'train.lrr'"),
        ({"trian.lr": 1e-3}, "'trian'"),
        ({"train.lr": "fast"}, "'train.lr' must be a number"),
        ({"train.batch_size": 3.5}, "'train.batch_size' must be an integer"),
        ({"model.pretrained": 1}, "'model.pretrained' must be true or false"),
        ({"test.metrics": "map_at_r"}, "'test.metrics' must be a list"),
    ],
)
def test_bad_override_names_the_key(override: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_config(PAPER, {}, override)


def test_unknown_key_in_protocol_file() -> None:
    bad = {**PAPER, "train": {**PAPER["train"], "epochs": 3}}
    with pytest.raises(ConfigError, match=r"'train.epochs'.*Valid keys there: batch_size"):
        config_from_mapping(bad)


def test_set_option_parsing() -> None:
    assert parse_set_option("train.lr=1e-4") == ("train.lr", 1e-4)
    assert parse_set_option("model.pretrained=false") == ("model.pretrained", False)
    assert parse_set_option("data.dataset=omniglot") == ("data.dataset", "omniglot")
    assert parse_set_option('test.metrics=["map_at_r"]') == ("test.metrics", ["map_at_r"])
    with pytest.raises(ConfigError, match="key=value"):
        parse_set_option("train.lr")


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"loss": "mfcnt"}, "Unknown loss 'mfcnt'. Did you mean 'mfcont'"),
        ({"loss": "mfcont", "budget": "tiny"}, "Unknown budget 'tiny'"),
        ({"loss": "mfcont", "dataset": "omniglott"}, "Did you mean 'omniglot'"),
        ({"loss": "mfcont", "sampler": "cmaes"}, "Unknown sampler 'cmaes'"),
        ({"loss": "mfcont", "overrides": {"model.trunk": "vgg"}}, "Unknown trunk 'vgg'"),
        ({"loss": "mfcont", "overrides": {"loss.margin": 0.1}}, "Unknown loss.margin for loss 'mfcont'"),
        ({"loss": "mfcont", "overrides": {"test.reps": 1}}, "test.reps must be >= 2"),
    ],
)
def test_run_request_validated_before_compute(request_kwargs: dict[str, object], message: str) -> None:
    run = MLRCRun(RunRequest(**request_kwargs))  # type: ignore[arg-type]
    with pytest.raises(Exception, match=message):
        run.resolve()
    assert not hasattr(run, "dataset")  # nothing was loaded


def test_search_range_override_keeps_scale() -> None:
    run = MLRCRun(RunRequest(loss="ms", overrides={"space.ms.alpha": [0.5, 5.0]}))
    run.resolve()
    original = run.loss_spec.search_space["alpha"]
    assert (run.search_space["alpha"].low, run.search_space["alpha"].high) == (0.5, 5.0)
    assert run.search_space["alpha"].log == original.log


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"space.ms.alpah": [0.5, 5.0]}, "'alpah' is not searched for loss 'ms'"),
        ({"space.ms.alpha": [5.0, 0.5]}, "low < high"),
        ({"space.msx.alpha": [0.5, 5.0]}, "Unknown loss 'msx'"),
        ({"space.ms.alpha": "wide"}, "must be a list"),
    ],
)
def test_bad_search_range_override(override: dict[str, object], message: str) -> None:
    with pytest.raises(Exception, match=message):
        MLRCRun(RunRequest(loss="ms", overrides=override)).resolve()
    # The torch-free preflight (``dmlbench run`` before it loads torch) finds it too.
    with pytest.raises(DmlbenchError, match=message):
        preflight(RunRequest(loss="ms", overrides=override))


@pytest.mark.parametrize("protocol", protocol_names())
@pytest.mark.parametrize(
    ("key", "value"), [("query_fraction", 0.5), ("split_seed", 7), ("train_classes", 10)]
)
def test_protocol_settings_rejected_elsewhere(protocol: str, key: str, value: object) -> None:
    data = load_protocol_file(protocol)
    owner = next(m.protocol for m in MOVED_KEYS.values() if m.setting == key)
    setting = f"settings.{key}"
    if protocol_kind(data) == owner:
        resolved, paper = resolve_run_config(data, {}, {setting: value})
        assert setting in {d.key for d in deviations(resolved, paper)}
    else:
        message = f"{setting} = {value!r} is a setting of the '{owner}' protocol, but this run's protocol"
        with pytest.raises(ConfigError, match=message):
            resolve_run_config(data, {}, {setting: value})


def test_protocol_names_are_the_protocol_files() -> None:
    names = protocol_names()
    assert "mlrc" in names and "regress" not in names  # regress.toml is the regress suite's file
    with pytest.raises(
        UnknownNameError, match=f"Unknown protocol 'regress'.*Valid choices: {', '.join(names)}"
    ):
        load_protocol_file("regress")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"eval.knn": "annoy"}, "eval.knn must be one of exact, ivf, hnsw, got 'annoy'"),
        ({"eval.knn": "ivf", "eval.ivf_nprobe": 0}, "eval.ivf_nprobe must be >= 1, got 0"),
        ({"eval.ivf_nprobe": 4}, "eval.ivf_nprobe = 4 configures the 'ivf' index, but eval.knn is 'exact'"),
        ({"eval.knn": "ivf", "eval.hnsw_m": 8}, "eval.hnsw_m = 8 configures the 'hnsw' index"),
    ],
)
def test_bad_knn_search_names_the_key(override: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_config(PAPER, {}, override)


def test_exact_knn_is_the_default_and_an_approximate_one_is_a_deviation() -> None:
    resolved, paper = resolve_config(PAPER, {}, {})
    assert resolved.eval.knn == "exact"
    resolved, paper = resolve_config(PAPER, {}, {"eval.knn": "ivf", "eval.ivf_nprobe": 8})
    found = {d.key: (d.value, d.paper) for d in deviations(resolved, paper)}
    assert found == {"eval.knn": ("ivf", "exact"), "eval.ivf_nprobe": (8, 16)}


def test_is_neutral_holds_only_for_a_neutral_default_at_its_neutral_value() -> None:
    from benchmark.config import NEUTRAL_DEFAULTS, is_neutral

    for key, neutral in NEUTRAL_DEFAULTS.items():
        assert is_neutral(key, neutral), key
    assert not is_neutral("search.log_wide_ranges", True)
    assert not is_neutral("eval.knn", "ivf")
    # A setting outside the table is never neutral, whatever its value (train.lr existed from the start).
    assert not is_neutral("train.lr", 1e-4)
