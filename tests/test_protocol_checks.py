"""A protocol's own checks are pure, torch-free functions its declaration names (issue 31 item 8):
``ProtocolSpec.check_config``, made by ``dmlbench run``'s preflight before torch is imported and
again by the run class's ``resolve``, so that the early answer and the run cannot disagree."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmark.config import PROTOCOL_PATH_VAR, RunConfig
from benchmark.data.registry import MIN_IMAGE_SIZE, check_image_size
from benchmark.errors import ConfigError
from benchmark.protocol.cbir import check_cbir_config
from benchmark.protocol.mlrc import check_mlrc_config
from benchmark.protocol.registry import PROTOCOLS, ProtocolSpec, protocol_spec, resolve_run_config
from benchmark.protocol.repeated_checks import check_repeated_config, check_repeated_request, unused_override
from benchmark.protocol.request import RunRequest, dataset_paper_settings, preflight, request_layers

REPO = Path(__file__).resolve().parent.parent


def _config(protocol: str, **overrides: Any) -> RunConfig:
    """The smoke config of ``protocol`` with dotted-key ``overrides`` (resolved, not yet checked)."""
    request = RunRequest(loss="contrastive", protocol=protocol, budget="smoke", overrides=overrides)
    return resolve_run_config(*request_layers(request), dataset_paper_settings)[0]


def _with(c: RunConfig, section: str, **values: Any) -> RunConfig:
    """``c`` with fields of one section replaced (bypassing resolution: any value can be tried)."""
    return dataclasses.replace(c, **{section: dataclasses.replace(getattr(c, section), **values)})


# -- the declarations name their checks -------------------------------------------------------------


def test_every_builtin_protocol_declares_its_check() -> None:
    assert protocol_spec("mlrc").check_config is check_mlrc_config
    assert protocol_spec("traditional").check_config is check_repeated_config
    assert protocol_spec("cbir").check_config is check_cbir_config


@pytest.mark.parametrize("protocol", ["mlrc", "traditional", "cbir"])
def test_each_protocols_smoke_config_passes_its_check(protocol: str) -> None:
    c = _config(protocol)
    protocol_spec(protocol).check(c, RunRequest(loss="contrastive", protocol=protocol, budget="smoke"))


# -- mlrc -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("search", {"n_trials": 0}, "search.n_trials must be >= 1, got 0."),
        ("train", {"iters_per_epoch": 0}, "train.iters_per_epoch must be >= 1, got 0."),
        (
            "search",
            {"n_startup_trials": -1},
            "search.n_startup_trials must be in [0, search.n_trials=3], got -1.",
        ),
        (
            "search",
            {"n_startup_trials": 4},
            "search.n_startup_trials must be in [0, search.n_trials=3], got 4.",
        ),
        ("protocol", {"n_folds": 3}, "protocol.n_folds must be 4 for MLRC (got 3)."),
    ],
)
def test_mlrc_check_names_the_key_and_value(section: str, values: dict[str, Any], message: str) -> None:
    c = _with(_config("mlrc"), section, **values)
    with pytest.raises(ConfigError) as exc:
        check_mlrc_config(c)
    assert str(exc.value) == message


def test_mlrc_check_accepts_the_bounds() -> None:
    c = _config("mlrc")
    check_mlrc_config(_with(c, "search", n_startup_trials=0))
    check_mlrc_config(_with(c, "search", n_startup_trials=c.search.n_trials))
    check_mlrc_config(_with(c, "train", iters_per_epoch=1))


# -- traditional and cbir (no search) -----------------------------------------------------------------


def test_unused_override_names_the_first_search_key() -> None:
    assert unused_override(["loss.margin", "train.lr"]) is None
    assert unused_override(["search.n_trials", "train.lr"]) == "search.n_trials"
    assert unused_override(["space.ms.alpha"]) == "space.ms.alpha"
    assert unused_override(["search"]) == "search"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"overrides": {"search.n_trials": 5}},
            "Config key 'search.n_trials' is not used by protocol 'traditional'",
        ),
        ({"sampler": "random"}, "--sampler is not used by protocol 'traditional'"),
        ({"workers": 2}, "--workers/--storage share a search; protocol 'traditional' has none"),
        ({"storage": "sqlite:///x.db"}, "--workers/--storage share a search"),
        (
            {"jobs": 2},
            "protocol 'traditional' trains its repetitions one after another in this process (got --jobs 2",
        ),
    ],
)
def test_repeated_request_check(changes: dict[str, Any], message: str) -> None:
    request = dataclasses.replace(RunRequest(loss="contrastive", protocol="traditional"), **changes)
    with pytest.raises(ConfigError) as exc:
        check_repeated_request(request)
    assert message in str(exc.value)
    with pytest.raises(ConfigError):  # the protocol's check makes the request's
        check_repeated_config(_config("traditional"), request)


def test_repeated_request_check_accepts_one_job_or_the_default() -> None:
    for jobs in (0, 1):
        check_repeated_request(RunRequest(loss="contrastive", protocol="traditional", jobs=jobs))


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("train", {"iters_per_epoch": -1}, "train.iters_per_epoch must be >= 0 (0 = one pass"),
        (
            "protocol",
            {"n_folds": 4},
            "protocol.n_folds must be 1 for protocol 'traditional' (one fixed split), got 4",
        ),
        ("model", {"frozen_trunk": True}, "model.frozen_trunk = true is only supported by the mlrc protocol"),
    ],
)
def test_repeated_config_check(section: str, values: dict[str, Any], message: str) -> None:
    c = _with(_config("traditional"), section, **values)
    with pytest.raises(ConfigError) as exc:
        check_repeated_config(c)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        (
            "train",
            {"eval_every": 1},
            "train.eval_every (1) must be >= train.max_epochs (2) in the cbir protocol: no model "
            "selection on the queries.",
        ),
        (
            "test",
            {"metrics": ["map", "map_at_r"]},
            "test.metrics: 'map_at_r' is not a query-vs-database metric",
        ),
        ("protocol", {"n_folds": 4}, "protocol.n_folds must be 1 for protocol 'cbir'"),
    ],
)
def test_cbir_check(section: str, values: dict[str, Any], message: str) -> None:
    c = _with(_config("cbir"), section, **values)
    with pytest.raises(ConfigError) as exc:
        check_cbir_config(c)
    assert message in str(exc.value)


def test_cbir_check_makes_the_request_check() -> None:
    request = RunRequest(loss="contrastive", protocol="cbir", jobs=3)
    with pytest.raises(ConfigError, match=r"protocol 'cbir' trains its repetitions.*got --jobs 3"):
        check_cbir_config(_config("cbir"), request)


# -- the image size floor ---------------------------------------------------------------------------


def test_image_size_floor() -> None:
    check_image_size(MIN_IMAGE_SIZE)
    with pytest.raises(ConfigError) as exc:
        check_image_size(MIN_IMAGE_SIZE - 1)
    assert (
        str(exc.value) == f"data.image_size must be at least {MIN_IMAGE_SIZE} px, got {MIN_IMAGE_SIZE - 1}."
    )


def test_preflight_refuses_a_small_image_size(tmp_path: Path) -> None:
    request = RunRequest(
        loss="contrastive",
        budget="smoke",
        overrides={"data.image_size": 4},
        out=tmp_path / "runs",
        results_dir=tmp_path / "res",
    )
    with pytest.raises(ConfigError, match=r"data\.image_size must be at least 8 px, got 4"):
        preflight(request)


# -- the hook: preflight, the runner, a plugin -----------------------------------------------------


def _request(tmp_path: Path, protocol: str = "mlrc", **changes: Any) -> RunRequest:
    base = RunRequest(
        loss="contrastive",
        protocol=protocol,
        budget="smoke",
        out=tmp_path / "runs",
        results_dir=tmp_path / "res",
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("protocol", "changes", "message"),
    [
        ("mlrc", {"overrides": {"search.n_trials": 0}}, "search.n_trials must be >= 1, got 0."),
        ("mlrc", {"overrides": {"protocol.n_folds": 3}}, "protocol.n_folds must be 4 for MLRC (got 3)."),
        ("traditional", {"jobs": 2}, "got --jobs 2"),
        ("cbir", {"overrides": {"settings.query_fraction": 1.5}}, "got 1.5"),
    ],
)
def test_preflight_and_the_runner_give_the_same_answer(
    protocol: str, changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    request = _request(tmp_path, protocol, **changes)
    with pytest.raises(ConfigError) as early:
        preflight(request)
    assert message in str(early.value)
    from benchmark.protocol.dispatch import runner_for

    with pytest.raises(ConfigError) as late:
        runner_for(protocol)(request).resolve()
    assert str(late.value) == str(early.value)


def test_a_plugin_protocol_declares_its_check_and_preflight_calls_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int]] = []

    def check(config: RunConfig, request: RunRequest) -> None:
        seen.append((config.protocol.name, request.seed))
        raise ConfigError(f"train.batch_size must be even for toycheck, got {config.train.batch_size}.")

    monkeypatch.setitem(
        PROTOCOLS._items, "toycheck", ProtocolSpec("toycheck", lambda request: None, check_config=check)
    )
    (tmp_path / "toyfile.toml").write_text('[protocol]\nname = "toycheck"\nn_folds = 1\n', encoding="utf-8")
    monkeypatch.setenv(PROTOCOL_PATH_VAR, str(tmp_path))
    with pytest.raises(ConfigError, match="must be even for toycheck"):
        preflight(_request(tmp_path, "toyfile", seed=7))
    assert seen == [("toycheck", 7)]


def test_a_plugin_protocol_check_must_be_callable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ProtocolSpec("toybad", lambda request: None, check_config="no")  # type: ignore[arg-type]
    monkeypatch.setitem(PROTOCOLS._items, "toybad", spec)
    (tmp_path / "toybadfile.toml").write_text('[protocol]\nname = "toybad"\n', encoding="utf-8")
    monkeypatch.setenv(PROTOCOL_PATH_VAR, str(tmp_path))
    with pytest.raises(
        ConfigError, match=r"Protocol 'toybad': ProtocolSpec\.check_config must be None or callable"
    ):
        preflight(_request(tmp_path, "toybadfile"))


def test_the_protocol_checks_import_no_torch() -> None:
    code = (
        "import sys\n"
        "from benchmark.protocol.registry import protocol_spec\n"
        "for kind in ('mlrc', 'traditional', 'cbir'):\n"
        "    assert protocol_spec(kind).check_config is not None\n"
        "import benchmark.data.registry\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_a_plugin_protocol_on_repeated_run_without_a_check_still_refuses_what_it_ignores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark.protocol.traditional_run import TraditionalRun

    monkeypatch.setitem(PROTOCOLS._items, "toyrep", ProtocolSpec("toyrep", TraditionalRun))
    (tmp_path / "toyrepfile.toml").write_text('[protocol]\nname = "toyrep"\nn_folds = 1\n', encoding="utf-8")
    monkeypatch.setenv(PROTOCOL_PATH_VAR, str(tmp_path))
    request = _request(tmp_path, "toyrepfile", jobs=2)
    with pytest.raises(ConfigError, match=r"protocol 'toyrepfile' trains its repetitions.*got --jobs 2"):
        TraditionalRun(request).resolve()
