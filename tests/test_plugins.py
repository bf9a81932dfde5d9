"""Losses (and datasets, trunks) from outside the package: references, entry points, errors, provenance."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cli_helpers import dmlbench

from benchmark import plugins
from benchmark.data import DATASETS
from benchmark.errors import ConfigError, DmlbenchError
from benchmark.losses import LOSSES, LossContext, SearchDim, build_loss
from benchmark.metrics import METRICS
from benchmark.models.trunks import TRUNKS
from benchmark.registry import Registry
from benchmark.report.leaderboard import footer_notes

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "my_loss"

LOSS_CLASS = """
import torch
from torch import nn


class {cls}(nn.Module):
    name = {name!r}
    defaults = {{"margin": 0.5}}
    search_space = {{"margin": (0.0, 0.9)}}
    pair_based = True
    embedding_space = "cosine"

    def __init__(self, ctx, params):
        super().__init__()
        self.margin = params["margin"]
        self.classes = ctx.num_classes

    def forward(self, embeddings, labels):
        return (embeddings.sum() * 0 + self.margin) * self.classes
"""


@pytest.fixture(autouse=True)
def clean_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without plugins and leaves the registries and the environment as it found them."""
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    saved: list[tuple[Registry[Any], dict[str, Any], dict[str, Any], dict[str, str], bool]] = [
        (r, dict(r._items), dict(r._sources), dict(r._loaded), r._all_discovered)
        for r in plugins.REGISTRIES.values()
    ]
    yield
    for registry, items, sources, loaded, discovered in saved:
        registry._items.clear()
        registry._items.update(items)
        registry._sources.clear()
        registry._sources.update(sources)
        registry._loaded.clear()
        registry._loaded.update(loaded)
        registry._all_discovered = discovered


def write_plugin(tmp_path: Path, stem: str, source: str) -> Path:
    path = tmp_path / f"{stem}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_file_reference_registers_the_declared_loss(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "mine", LOSS_CLASS.format(cls="Mine", name="mine"))
    name = plugins.load_ref("loss", f"{path}:Mine")
    spec = LOSSES.get(name)
    assert name == "mine" and spec.name == "mine"
    assert dict(spec.defaults) == {"margin": 0.5}
    assert dict(spec.search_space) == {"margin": SearchDim(0.0, 0.9)}
    assert spec.pair_based and spec.m_per_class == 4 and not spec.has_parameters
    assert spec.embedding_space == "cosine"
    # Built like a built-in loss: the context and the complete parameters reach the class.
    loss = build_loss("mine", LossContext(num_classes=3, embedding_dim=4), {"margin": 0.25})
    assert float(loss(torch.zeros(2, 4), torch.tensor([0, 1]))) == pytest.approx(0.75)
    source = plugins.source_of("loss", "mine")
    assert source is not None and source.file == str(path)
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert source.distribution is None and "mine.py sha256:" in source.describe()
    # Worker processes inherit the reference, with an absolute path.
    assert ["loss", f"{path}:Mine", str(path.parent)] in json.loads(os.environ[plugins.ENV_VAR])
    assert plugins.load_ref("loss", f"{path}:Mine") == "mine"  # loading again is a no-op


def test_module_reference_is_imported_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plugin(tmp_path, "cwd_loss_mod", LOSS_CLASS.format(cls="CwdLoss", name="cwdloss"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert plugins.load_ref("loss", "cwd_loss_mod:CwdLoss") == "cwdloss"
    finally:
        sys.modules.pop("cwd_loss_mod", None)
    source = plugins.source_of("loss", "cwdloss")
    assert source is not None and source.module == "cwd_loss_mod"


def test_a_loss_spec_object_is_accepted_as_it_is(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "specmod",
        """
        from benchmark.losses import LossSpec, SearchDim
        from torch import nn

        SPEC = LossSpec(
            name="speced", display_name="Speced", factory=lambda ctx, p: nn.Identity(),
            defaults={"t": 0.1, "param_lr": 0.01}, search_space={"t": SearchDim(0.01, 1.0, log=True)},
            pair_based=False, has_parameters=True, embedding_space="euclidean",
        )
        """,
    )
    assert plugins.load_ref("loss", f"{path}:SPEC") == "speced"
    spec = LOSSES.get("speced")
    assert spec.m_per_class == 1 and spec.has_parameters and spec.embedding_space == "euclidean"


MALFORMED = {
    "missing attribute": (
        LOSS_CLASS.format(cls="X", name="x1").replace('    search_space = {"margin": (0.0, 0.9)}\n', ""),
        "X",
        "does not declare search_space",
    ),
    "wrong type": (
        LOSS_CLASS.format(cls="X", name="x2").replace("pair_based = True", 'pair_based = "yes"'),
        "X",
        "pair_based must be True or False",
    ),
    "bad embedding space": (
        LOSS_CLASS.format(cls="X", name="x3").replace('"cosine"', '"hyperbolic"'),
        "X",
        "embedding_space must be 'cosine' or 'euclidean'",
    ),
    "import error": ("import not_a_module_dmlbench_xyz\n", "X", "failed to import: ModuleNotFoundError"),
    "clash with a built-in": (LOSS_CLASS.format(cls="X", name="contrastive"), "X", "name of a built-in loss"),
    "no such object": (LOSS_CLASS.format(cls="X", name="x4"), "Nope", "has no attribute 'Nope'"),
    "not a class": ("X = 3\n", "X", "a loss plugin must be a LossSpec"),
    "default outside the range": (
        LOSS_CLASS.format(cls="X", name="x5").replace('"margin": 0.5', '"margin": 2.0'),
        "X",
        "outside its search range",
    ),
    "malformed search range": (
        LOSS_CLASS.format(cls="X", name="x6").replace("(0.0, 0.9)", "(0.9,)"),
        "X",
        "must be a SearchDim or (low, high)",
    ),
    "a path as its name": (
        LOSS_CLASS.format(cls="X", name="../../evil"),
        "X",
        "'../../evil' is not a valid name",
    ),
    "a slash in its name": (LOSS_CLASS.format(cls="X", name="a/b"), "X", "'a/b' is not a valid name"),
    "a NUL in its name": (LOSS_CLASS.format(cls="X", name="a\0b"), "X", "'a\\x00b' is not a valid name"),
    "exits at import": ("import sys\nsys.exit(3)\n", "X", "called sys.exit(3) while being imported"),
    "not a module": (
        LOSS_CLASS.format(cls="X", name="x7").replace("class X(nn.Module)", "class X"),
        "X",
        "must subclass torch.nn.Module",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_plugin_is_a_config_error_naming_the_problem(tmp_path: Path, case: str) -> None:
    source, attr, message = MALFORMED[case]
    path = write_plugin(tmp_path, f"bad_{abs(hash(case))}", source)
    before = LOSSES.names()
    with pytest.raises(ConfigError) as info:
        plugins.load_ref("loss", f"{path}:{attr}")
    assert message in str(info.value)
    assert LOSSES.names() == before  # nothing half-registered


@pytest.mark.parametrize(
    ("ref", "message"),
    [("no_colon_attr:", "must be MODULE:NAME"), ("./does_not_exist.py:X", "no such file")],
)
def test_a_malformed_reference_is_a_config_error(ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plugins.load_ref("loss", ref)


def test_dataset_and_trunk_plugins_register_their_specs(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "parts",
        """
        from torch import nn
        from benchmark.data import DatasetSpec
        from benchmark.models.trunks import TrunkSpec

        DATA = DatasetSpec("tinyset", "a tiny dataset", False, lambda options: None)
        TRUNK = TrunkSpec("tinytrunk", "a tiny trunk", lambda channels: (nn.Flatten(), 16), False)
        NOT_A_SPEC = object()
        """,
    )
    assert plugins.load_ref("dataset", f"{path}:DATA") == "tinyset"
    assert plugins.load_ref("trunk", f"{path}:TRUNK") == "tinytrunk"
    assert DATASETS.get("tinyset").description == "a tiny dataset"
    assert TRUNKS.get("tinytrunk").build(1)[1] == 16
    assert plugins.record_sources({"dataset": "tinyset", "trunk": "tinytrunk", "loss": "contrastive"}) == [
        plugins.source_of("dataset", "tinyset").to_dict(),  # type: ignore[union-attr]
        plugins.source_of("trunk", "tinytrunk").to_dict(),  # type: ignore[union-attr]
    ]
    with pytest.raises(ConfigError, match="a dataset plugin must be a DatasetSpec"):
        plugins.load_ref("dataset", f"{path}:NOT_A_SPEC")
    with pytest.raises(ConfigError, match="a trunk plugin must be a TrunkSpec"):
        plugins.load_ref("trunk", f"{path}:NOT_A_SPEC")


def make_distribution(site: Path, module: str, entry_points: str, dist: str = "fake-dist") -> None:
    """A minimal installed distribution in ``site``: a module and a .dist-info with entry points."""
    (site / f"{module}.py").write_text(textwrap.dedent(LOSS_CLASS.format(cls="EpLoss", name="eploss")))
    info = site / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    (info / "top_level.txt").write_text(f"{module}\n")


def test_entry_points_register_on_first_query_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(tmp_path, "ep_loss_mod", "[dmlbench.losses]\neploss = ep_loss_mod:EpLoss\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    LOSSES._all_discovered = False
    try:
        LOSSES.get("contrastive")
        assert "ep_loss_mod" not in sys.modules  # a built-in lookup does not import plugin code
        assert LOSSES.get("eploss").defaults == {"margin": 0.5}
        assert "ep_loss_mod" in sys.modules
        source = plugins.source_of("loss", "eploss")
        assert source is not None and (source.distribution, source.version) == ("fake-dist", "1.2.3")
        assert source.describe() == "fake-dist 1.2.3" and source.ref == "ep_loss_mod:EpLoss"
        assert "eploss" in LOSSES.names()
    finally:
        sys.modules.pop("ep_loss_mod", None)


def test_a_module_reference_records_its_installed_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_distribution(tmp_path, "ref_dist_mod", "", dist="ref-dist")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert plugins.load_ref("loss", "ref_dist_mod:EpLoss") == "eploss"
    finally:
        sys.modules.pop("ref_dist_mod", None)
    source = plugins.source_of("loss", "eploss")
    assert source is not None and (source.distribution, source.version) == ("ref-dist", "1.2.3")


def test_an_entry_point_named_unlike_its_loss_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_distribution(tmp_path, "ep_bad_mod", "[dmlbench.losses]\nother = ep_bad_mod:EpLoss\n", "bad-dist")
    monkeypatch.syspath_prepend(str(tmp_path))
    LOSSES._all_discovered = False
    try:
        with pytest.raises(ConfigError, match="entry point is named 'other' but the loss it names is called"):
            LOSSES.get("other")
    finally:
        sys.modules.pop("ep_bad_mod", None)


def _build_in_child(name: str) -> float | str:
    try:
        loss = build_loss(name, LossContext(num_classes=2, embedding_dim=4), {})
    except Exception as exc:  # returned, not raised: an exception that does not unpickle hangs the pool
        return f"{type(exc).__name__}: {exc}"
    return float(loss(torch.zeros(2, 4), torch.tensor([0, 1])))


def test_a_spawned_worker_finds_a_file_plugin_of_its_parent(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "spawned", LOSS_CLASS.format(cls="Spawned", name="spawned"))
    name = plugins.load_ref("loss", f"{path}:Spawned")
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_build_in_child, (name,)) == pytest.approx(1.0)  # margin 0.5 x 2 classes


def test_the_leaderboard_footer_names_the_plugin_of_a_row(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "footer", LOSS_CLASS.format(cls="Footer", name="footer"))
    plugins.load_ref("loss", f"{path}:Footer")
    sources = plugins.record_sources({"loss": "footer", "dataset": "glyphs", "trunk": "smallcnn"})
    assert [s["name"] for s in sources] == ["footer"]  # built-ins are not listed
    lines = footer_notes([{"loss": "footer", "plugins": sources}])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert f"footer: loss plugin: {path}:Footer (sha256 {digest})." in lines
    dist = dict(sources[0], distribution="my-dist", version="9.9")
    expected = f"x: loss plugin: my-dist 9.9 ({path}:Footer, sha256 {digest})."
    assert expected in footer_notes([{"loss": "x", "plugins": [dist]}])


def test_cli_malformed_plugin_exits_2_naming_what_is_missing(tmp_path: Path, cache_dir: Path) -> None:
    source = LOSS_CLASS.format(cls="Half", name="half").replace("    pair_based = True\n", "")
    path = write_plugin(tmp_path, "half", source)
    out = dmlbench(
        "run", "--budget", "smoke", "--loss", f"{path}:Half", "--out", str(tmp_path), cache=cache_dir
    )
    assert out.returncode == 2, out.stderr
    assert "does not declare pair_based" in out.stderr and "Traceback" not in out.stderr


def pip_install_example(target: Path) -> None:
    """``pip install examples/my_loss`` into ``target`` (offline, deps already present), from a copy
    so that the build leaves nothing in the checkout."""
    src = target.parent / "my_loss_src"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(src)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "--target", str(target), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_installed_example_plugin_runs_mlrc_smoke_and_shows_in_the_leaderboard(
    tmp_path: Path, cache_dir: Path
) -> None:
    site = tmp_path / "site"
    pip_install_example(site)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]),
        "DMLBENCH_CACHE": str(cache_dir),
    }
    env.pop(plugins.ENV_VAR, None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "benchmark.cli.main", *args],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800,
        )  # fmt: skip

    listed = cli("list", "losses")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("margindev "))
    assert "[plugin: dmlbench-my-loss 0.1.0; pair-based (m=4); cosine]" in line
    run = cli("run", "--budget", "smoke", "--loss", "margindev", "--quiet")
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "results/glyphs/mlrc/records/margindev.smoke.seed0.json").read_text())
    (source,) = record["plugins"]
    assert (source["kind"], source["name"], source["ref"]) == (
        "loss",
        "margindev",
        "my_loss:MarginDevianceLoss",
    )
    assert (source["distribution"], source["version"]) == ("dmlbench-my-loss", "0.1.0")
    assert source["sha256"] == hashlib.sha256((site / "my_loss.py").read_bytes()).hexdigest()
    board = (tmp_path / "results/glyphs/mlrc/leaderboard.md").read_text()
    assert "| Margin deviance (example plugin) |" in board
    assert "margindev: loss plugin: dmlbench-my-loss 0.1.0 (my_loss:MarginDevianceLoss" in board


def test_cli_plugin_calling_sys_exit_at_import_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli.main import main

    path = write_plugin(tmp_path, "quitter", "import sys\nsys.exit(3)\n")
    code = main(["run", "--loss", f"{path}:X", "--out", str(tmp_path / "runs"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"Plugin '{path}:X' called sys.exit(3) while being imported" in err
    assert not (tmp_path / "runs").exists()


METRIC_MODULE = """
import numpy as np

from benchmark.metrics import MetricSpec


def _hits_at_2(query_labels, neighbour_labels, r):
    return (neighbour_labels[:, :2] == query_labels[:, None]).any(axis=1).astype(np.float64)


HITS = MetricSpec(
    name="hits_at_2",
    display_name="Hits@2",
    higher_is_better=True,
    k_needed=lambda labels: 2,
    fn=_hits_at_2,
    description="A neighbour of the query's class among the first two.",
)
"""


def _score_with(metric: str) -> dict[str, float]:
    from benchmark.metrics import evaluate

    embeddings = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]], dtype=np.float32)
    return evaluate(embeddings, np.array([0, 0, 1, 1]), "cosine", metrics=[metric, "precision_at_1"])


def test_a_metric_plugin_comes_by_entry_point_like_the_other_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_distribution(tmp_path, "ep_metric_mod", "[dmlbench.metrics]\nhits_at_2 = ep_metric_mod:HITS\n")
    (tmp_path / "ep_metric_mod.py").write_text(textwrap.dedent(METRIC_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    METRICS._all_discovered = False
    try:
        METRICS.get("map_at_r")
        assert "ep_metric_mod" not in sys.modules  # a built-in lookup does not import plugin code
        assert _score_with("hits_at_2") == {"hits_at_2": 1.0, "precision_at_1": 1.0}
        source = plugins.source_of("metric", "hits_at_2")
        assert source is not None and source.distribution == "fake-dist"
        assert "hits_at_2" in METRICS.names()
    finally:
        sys.modules.pop("ep_metric_mod", None)


def test_a_metric_plugin_reaches_spawned_processes_through_the_environment(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "env_metric", METRIC_MODULE)
    assert plugins.load_ref("metric", f"{path}:HITS") == "hits_at_2"
    assert ["metric", f"{path}:HITS", str(path.parent)] in json.loads(os.environ[plugins.ENV_VAR])
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_score_with, ("hits_at_2",)) == {"hits_at_2": 1.0, "precision_at_1": 1.0}


def test_a_metric_plugin_must_be_a_metric_spec(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "not_metric", "HITS = 3\n")
    with pytest.raises(ConfigError, match="a metric plugin must be a MetricSpec"):
        plugins.load_ref("metric", f"{path}:HITS")


def test_an_unknown_plugin_kind_names_the_kinds() -> None:
    with pytest.raises(DmlbenchError, match="plugin kinds: loss, dataset, trunk, metric, budget"):
        plugins.load_ref("sampler", "x.py:Y")


def test_a_records_plugins_parse_into_the_type_the_run_wrote(tmp_path: Path) -> None:
    # One schema: the run writes PluginSource.to_dict(), the reader parses it back into PluginSource.
    from benchmark.records import parse_plugins

    path = write_plugin(tmp_path, "roundtrip", LOSS_CLASS.format(cls="RoundTrip", name="roundtrip"))
    plugins.load_ref("loss", f"{path}:RoundTrip")
    source = plugins.source_of("loss", "roundtrip")
    assert source is not None
    assert parse_plugins({"plugins": plugins.record_sources({"loss": "roundtrip"})}) == (source,)
