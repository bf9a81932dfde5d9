"""Each protocol is one place: its TOML file and its module declare it (budget overrides, settings
only it reads, its run class); budgets.py and config.py name no protocol."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmark.budgets import BUDGETS
from benchmark.errors import UnknownNameError
from benchmark.protocol.registry import budget_overrides, protocol_spec, protocol_specs, setting_names

ROOT = Path(__file__).resolve().parent.parent

# A protocol from outside the package: its module (declaration and a run class) and its TOML file,
# announced by an installed distribution's entry point (dmlbench.protocols).
_MODULE = '''
from benchmark.protocol.base import ProtocolRun
from benchmark.protocol.registry import ProtocolSpec


class ToyRun(ProtocolRun):
    """A protocol whose steps are never run here: the registry only has to find it."""


PROTOCOL = ProtocolSpec(
    "toy",
    ToyRun,
    budget_overrides={"smoke": {"test.reps": 3, "train.max_epochs": 1}},
)
'''
_TOML = """
[protocol]
name = "toy"
description = "a protocol declared outside the package"
n_folds = 1
"""
_CHECK = """
import json, sys
import benchmark.config as config
from pathlib import Path
config.PROTOCOLS_DIR = Path(sys.argv[1])
from benchmark.budgets import BUDGETS
from benchmark.protocol.dispatch import runner_for
from benchmark.protocol.request import RunRequest, request_layers
from benchmark.protocol.registry import budget_overrides, protocol_specs
from benchmark.records import RECORD_KINDS
_, smoke, _ = request_layers(RunRequest(loss="contrastive", protocol="toyfile", budget="smoke"))
print(json.dumps({
    "kinds": [s.name for s in protocol_specs()],
    "smoke": dict(smoke),
    "mini": dict(budget_overrides("mini", "toy")) == dict(BUDGETS.get("mini").overrides),
    "runner": runner_for("toyfile").__name__,
    "runner_module": runner_for("toyfile").__module__,
    "record_kind": "toy" in RECORD_KINDS,
}))
"""


def test_a_protocol_from_its_module_and_toml_file_alone(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "toy_protocol.py").write_text(_MODULE, encoding="utf-8")
    dist = site / "toy_protocol-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-protocol\nVersion: 0.1\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[dmlbench.protocols]\ntoy = toy_protocol:PROTOCOL\n", encoding="utf-8"
    )
    protocols = tmp_path / "protocols"
    protocols.mkdir()
    (protocols / "toyfile.toml").write_text(textwrap.dedent(_TOML), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(protocols)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["kinds"] == ["toy"]  # the only protocol file in that folder
    # Its own smoke overrides (not the budget's MLRC ones), the budget's own for a budget it leaves out.
    assert out["smoke"] == {"test.reps": 3, "train.max_epochs": 1}
    assert out["mini"] is True
    assert (out["runner"], out["runner_module"]) == ("ToyRun", "toy_protocol")
    assert out["record_kind"] is True  # report and compare read its records


def test_builtin_protocols_declare_their_own_settings() -> None:
    kinds = [s.name for s in protocol_specs()]
    assert kinds == ["cbir", "mlrc", "traditional"]
    assert {s.name: setting_names(s) for s in protocol_specs()} == {
        "cbir": ("query_fraction", "split_seed"),
        "mlrc": (),
        "traditional": (
            "train_classes",
            "warmup_epochs",
            "lr_decay_step",
            "lr_decay_gamma",
            "clip_grad_value",
        ),
    }
    smoke = BUDGETS.get("smoke").overrides
    assert budget_overrides("smoke", "mlrc") is smoke
    for kind in ("traditional", "cbir"):
        own = budget_overrides("smoke", kind)
        assert own is not smoke and not any(k.startswith("search.") for k in own)
    assert budget_overrides("paper", "cbir") == {}


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_budgets_and_config_name_no_protocol() -> None:
    # "mlrc" stays the default kind of a protocol file without [protocol] name (config.protocol_kind).
    others = {s.name for s in protocol_specs()} - {"mlrc"}
    for module in ("budgets.py", "config.py"):
        named = _string_constants(ROOT / "benchmark" / module) & others
        assert named == set(), f"benchmark/{module} names protocol(s) {sorted(named)}"


def test_an_unknown_protocol_kind_names_every_known_one() -> None:
    with pytest.raises(UnknownNameError, match="Unknown protocol kind 'nosuch'") as info:
        protocol_spec("nosuch")
    choices = str(info.value).split("Valid choices:")[1]
    assert {"mlrc", "traditional", "cbir"} <= {c.strip(" .") for c in choices.split(",")}


def test_a_protocol_file_by_path_or_on_the_include_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark import config
    from benchmark.errors import ConfigError
    from benchmark.protocol.request import RunRequest, request_layers

    monkeypatch.setenv(config.PROTOCOL_PATH_VAR, "")  # restored after the test
    own = tmp_path / "elsewhere"
    own.mkdir()
    text = (config.PROTOCOLS_DIR / "mlrc.toml").read_text(encoding="utf-8")
    (own / "mymlrc.toml").write_text(text.replace("n_folds = 4", "n_folds = 3"), encoding="utf-8")
    assert "n_folds = 4" in text
    assert config.add_protocol_file(own / "mymlrc.toml") == "mymlrc"
    assert os.environ[config.PROTOCOL_PATH_VAR] == str(own)  # what spawned workers inherit
    assert "mymlrc" in config.protocol_names() and {"mlrc", "cbir"} <= set(config.protocol_names())
    protocol_data, _, _ = request_layers(RunRequest(loss="contrastive", protocol="mymlrc", budget="smoke"))
    assert protocol_data["protocol"]["n_folds"] == 3
    # A built-in name is never shadowed, by path or on the include path.
    (own / "mlrc.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"protocol 'mlrc' is already .*protocols/mlrc.toml; rename"):
        config.add_protocol_file(own / "mlrc.toml")
    assert config.protocol_path("mlrc") == config.PROTOCOLS_DIR / "mlrc.toml"
    # The file name is checked as any protocol name; the file must be a protocol file.
    (own / "my proto.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="the file name is the protocol's name; Invalid protocol name"):
        config.add_protocol_file(own / "my proto.toml")
    (own / "settings.toml").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"settings.toml: a protocol file has a \[protocol\] table"):
        config.add_protocol_file(own / "settings.toml")
    with pytest.raises(ConfigError, match=r"no such \.toml file"):
        config.add_protocol_file(own / "missing.toml")


def test_protocol_and_protocol_file_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark import api
    from benchmark.errors import ConfigError

    with pytest.raises(ConfigError, match="Give either --protocol or --protocol-file, not both"):
        api.run("contrastive", protocol="cbir", protocol_file=tmp_path / "x.toml", out=tmp_path)
    from benchmark.cli.main import main

    argv = ["run", "--loss", "contrastive", "--protocol", "mlrc", "--protocol-file", str(tmp_path / "x.toml")]
    assert main(argv) == 2
    assert "Give either --protocol or --protocol-file, not both" in capsys.readouterr().err


@dataclasses.dataclass(frozen=True)
class _ToySettings:
    """A protocol's own settings block: its keys, their types and defaults."""

    alpha: float = 0.5
    mode: str = "fast"


def test_a_protocol_declares_its_settings_and_the_config_checks_them() -> None:
    from benchmark.config import config_to_dict, deviations
    from benchmark.errors import ConfigError
    from benchmark.protocol.registry import PROTOCOLS, ProtocolSpec, register_protocol, resolve_run_config
    from benchmark.records import RECORD_KINDS

    spec = register_protocol(ProtocolSpec("toyset", lambda request: None, settings=_ToySettings))
    try:
        toml = {"protocol": {"name": "toyset"}, "settings": {"alpha": 0.7}}
        resolved, paper = resolve_run_config(toml, {}, {"settings.alpha": 0.9})
        assert spec.settings_of(resolved) == _ToySettings(alpha=0.9)
        assert resolved.settings == {"alpha": 0.9, "mode": "fast"}  # defaults filled: the record names all
        assert [(d.key, d.paper, d.value) for d in deviations(resolved, paper)] == [
            ("settings.alpha", 0.7, 0.9)
        ]
        with pytest.raises(
            ConfigError, match=r"key 'settings\.beta' in section \[settings\].*Valid keys there: alpha, mode"
        ):
            resolve_run_config(toml, {}, {"settings.beta": 1})
        with pytest.raises(ConfigError, match=r"Config key 'settings\.alpha' must be a number, got 'x'"):
            resolve_run_config(toml, {}, {"settings.alpha": "x"})
        # A protocol without settings refuses them; its config (and hash) has no settings table.
        mlrc = load_mlrc()
        with pytest.raises(ConfigError, match=r"Protocol 'mlrc' has no settings of its own.*settings\.alpha"):
            resolve_run_config(mlrc, {}, {"settings.alpha": 0.9})
        assert "settings" not in config_to_dict(resolve_run_config(mlrc, {}, {})[0])
    finally:
        PROTOCOLS._items.pop("toyset")
        RECORD_KINDS._items.pop("toyset")


def load_mlrc() -> dict[str, object]:
    from benchmark.config import load_protocol_file

    return load_protocol_file("mlrc")
