"""The traditional protocol as the Mean-Field authors ran it (issue 13 §5; mft-in-dml train.py):
avg+max pooling, kaiming embedder, BatchNorm fully frozen, warm-up epoch, step lr decay,
gradient clipping at 10, RandomResizedCrop(224, scale 0.08-1), SOP's official class split."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import dmlbench
from PIL import Image
from test_paper_settings import _pixels, make_sop_tree

from benchmark.config import (
    RunConfig,
    config_from_mapping,
    deviations,
    load_protocol_file,
)
from benchmark.data.augment import IMAGENET_AUGMENT
from benchmark.data.base import ImageDataset
from benchmark.engine.train import build_fold_model, train_with_loss
from benchmark.engine.training_options import LoopControl, LoopOptions, configure_model
from benchmark.errors import ConfigError
from benchmark.losses import LOSSES
from benchmark.models.trunks import build_model
from benchmark.protocol.registry import budget_overrides, resolve_run_config
from benchmark.protocol.request import dataset_paper_settings, validate_common
from benchmark.protocol.run_data import AUGMENTS
from benchmark.protocol.traditional import PROTOCOL, TraditionalSettings


def _paper() -> RunConfig:
    config, _ = resolve_run_config(load_protocol_file("traditional"), {}, {}, dataset_paper_settings)
    return config


def _settings(config: RunConfig) -> TraditionalSettings:
    settings: TraditionalSettings = PROTOCOL.settings_of(config)
    return settings


def test_the_protocol_file_holds_the_authors_settings() -> None:
    c = _paper()
    assert (c.model.pooling, c.model.embedder_init, c.model.freeze_trunk_bn_affine) == (
        "avg+max",
        "kaiming",
        True,
    )
    s = _settings(c)
    assert (s.warmup_epochs, s.lr_decay_step, s.lr_decay_gamma) == (1, 10, 0.5)
    assert s.clip_grad_value == 10 and c.data.image_size == 224
    assert AUGMENTS[c.data.augment] == IMAGENET_AUGMENT and IMAGENET_AUGMENT.scale == (0.08, 1.0)
    # MLRC keeps its own loop: its model options off, and the loop options are not its settings.
    m = config_from_mapping(load_protocol_file("mlrc"))
    assert (m.model.pooling, m.model.embedder_init, dict(m.settings)) == ("avg", "default", {})


@pytest.mark.parametrize(
    ("dataset", "lr", "step", "gamma", "bn_frozen", "mean_field_lr"),
    [
        # README commands of st-tech/mft-in-dml (BN-Inception, MFCWMS, --lr-ratio 2000 everywhere).
        ("cub200", 1e-4, 10, 0.5, True, 0.2),  # --lr 1e-4 --lr-decay-step 10 --bn-freeze 1
        ("cars196", 1e-4, 20, 0.5, True, 0.2),  # --lr-decay-step 20
        (
            "sop",
            6e-4,
            20,
            0.25,
            False,
            1.2,
        ),  # --lr 6e-4 --lr-decay-step 20 --lr-decay-gamma 0.25 --bn-freeze 0
        ("inshop", 6e-4, 20, 0.25, False, 1.2),  # the same as SOP
    ],
)
def test_per_dataset_settings_are_the_authors_commands(
    dataset: str, lr: float, step: int, gamma: float, bn_frozen: bool, mean_field_lr: float
) -> None:
    from benchmark.protocol.traditional import traditional_param_lr

    config, paper = resolve_run_config(
        load_protocol_file("traditional"), {}, {"data.dataset": dataset}, dataset_paper_settings
    )
    t, m, s = config.train, config.model, _settings(config)
    assert (t.lr, s.lr_decay_step, s.lr_decay_gamma) == (lr, step, gamma)
    assert (m.freeze_trunk_bn, m.freeze_trunk_bn_affine) == (bn_frozen, bn_frozen)
    assert traditional_param_lr(LOSSES.get("mfcwms"), t.lr) == mean_field_lr
    # They are the paper configuration of that dataset: no deviation is recorded for them.
    assert deviations(config, paper) == []
    # The paper text's single lr (1e-4) on SOP is a recorded deviation from the authors' 6e-4.
    if dataset == "sop":
        config, paper = resolve_run_config(
            load_protocol_file("traditional"), {}, {"data.dataset": "sop", "train.lr": 1e-4},
            dataset_paper_settings,
        )  # fmt: skip
        assert [(d.key, d.paper, d.value) for d in deviations(config, paper)] == [("train.lr", 6e-4, 1e-4)]


def _small_model(seed: int = 0, **model: object) -> torch.nn.Module:
    options = config_from_mapping({"model": {"trunk": "smallcnn", "pretrained": False, **model}}).model
    return configure_model(
        build_model("smallcnn", 3, 64, pretrained=False, weights_path="", seed=seed), options, seed
    )


def test_avg_max_pooling_is_the_sum_of_both() -> None:
    model = _small_model(pooling="avg+max")
    x = torch.randn(2, 3, 16, 16)
    # get_submodule / get_parameter: nn.Module attribute access is typed Tensor | Module.
    trunk = model.get_submodule("trunk")
    fmap = trunk.get_submodule("features")(x)
    assert torch.allclose(trunk(x), fmap.mean(dim=(2, 3)) + fmap.amax(dim=(2, 3)))
    with pytest.raises(ConfigError, match=r"model\.pooling"):
        configure_model(
            build_model("resnet18", 3, 8, pretrained=False, weights_path="", seed=0),
            config_from_mapping({"model": {"trunk": "resnet18", "pooling": "avg+max"}}).model,
            0,
        )


def test_kaiming_embedder_and_frozen_batchnorm_affine() -> None:
    model = _small_model(embedder_init="kaiming", freeze_trunk_bn_affine=True)
    weight = model.get_parameter("embedder.weight")  # (64, 128): fan_out = 64
    assert torch.all(model.get_parameter("embedder.bias") == 0)
    assert abs(float(weight.detach().std()) - math.sqrt(2 / 64)) < 0.1 * math.sqrt(2 / 64)
    bns = [m for m in model.get_submodule("trunk").modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(not p.requires_grad for bn in bns for p in bn.parameters())
    convs = [m for m in model.get_submodule("trunk").modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(p.requires_grad for c in convs for p in c.parameters())
    # Seeded: the same seed gives the same embedder.
    assert torch.equal(weight, _small_model(embedder_init="kaiming").get_parameter("embedder.weight"))


def test_step_decay_and_value_clipping() -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    control = LoopControl(
        LoopOptions(lr_decay_step=10, lr_decay_gamma=0.5, clip_grad_value=10.0), model, [opt]
    )
    lrs = []
    for _ in range(25):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients: nothing moves, but the scheduler sees the usual order
        control.end_epoch()
    assert lrs[0] == lrs[9] == 1e-4 and lrs[10] == lrs[19] == 5e-5 and lrs[20] == 2.5e-5
    (model(torch.full((4, 3), 1e3)).sum() * 1e3).backward()
    assert model.weight.grad is not None
    assert float(model.weight.grad.abs().max()) > 10
    control.after_backward()
    assert float(model.weight.grad.abs().max()) == 10


def _data(n_classes: int = 4, per_class: int = 8) -> ImageDataset:
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n_classes * per_class, 3, 16, 16), dtype=torch.uint8, generator=gen)
    return ImageDataset("toy", images, np.repeat(np.arange(n_classes, dtype=np.int64), per_class))


def test_warmup_epoch_trains_only_the_embedder() -> None:
    base = {"trunk": "smallcnn", "pretrained": False, "freeze_trunk_bn": True, "embedding_dim": 16}
    train = {
        "batch_size": 8,
        "iters_per_epoch": 3,
        "max_epochs": 1,
        "eval_every": 1,
        "patience": 1,
        "lr": 1e-2,
    }
    config = config_from_mapping({"model": base, "train": train})
    data = _data()
    before = build_fold_model(config, data, seed=5)
    _, after, _ = train_with_loss(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=data,
        val=data,
        augment=None,
        seed=5,
        device=torch.device("cpu"),
        optimizer="adamw",
        prefetch_depth=0,
        loop=LoopOptions(warmup_epochs=1),
    )
    for (name, p0), p1 in zip(before.trunk.named_parameters(), after.trunk.parameters(), strict=True):
        assert torch.equal(p0, p1), name
        assert p1.requires_grad  # trainable again after the fold
    assert not torch.equal(before.embedder.weight, after.embedder.weight)
    # Without warm-up the same epoch moves the trunk.
    _, moved, _ = train_with_loss(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=data,
        val=data,
        augment=None,
        seed=5,
        device=torch.device("cpu"),
        optimizer="adamw",
        prefetch_depth=0,
    )
    assert any(
        not torch.equal(a, b)
        for a, b in zip(before.trunk.parameters(), moved.trunk.parameters(), strict=True)
    )


def test_batchnorm_affine_trains_from_the_epoch_the_warmup_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The authors' warm-up block thaws every non-embedding parameter at epoch ``warm`` (0-based),
    BatchNorm γ/β included although ``bn_freeze`` froze them: with one warm-up epoch they are frozen
    in epoch 1 and train (receive gradients) from epoch 2; without a warm-up they never train."""
    import benchmark.engine.train as train_module

    seen: dict[int, tuple[bool, bool, bool]] = {}  # epoch -> (γ/β require grad, got grad, conv requires grad)

    class Spy(LoopControl):
        def start_epoch(self, epoch: int) -> None:
            super().start_epoch(epoch)
            self.epoch = epoch

        def after_backward(self) -> None:
            trunk = self.model.trunk
            assert isinstance(trunk, torch.nn.Module)
            bns = [m for m in trunk.modules() if isinstance(m, torch.nn.BatchNorm2d)]
            affine = [p for bn in bns for p in bn.parameters()]
            convs = [m.weight for m in trunk.modules() if isinstance(m, torch.nn.Conv2d)]
            assert bns and affine
            seen[self.epoch] = (
                all(p.requires_grad for p in affine),
                all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in affine),
                all(p.requires_grad for p in convs),
            )
            assert all(p.requires_grad == affine[0].requires_grad for p in affine)
            super().after_backward()

    monkeypatch.setattr(train_module, "LoopControl", Spy)
    base = {"trunk": "smallcnn", "pretrained": False, "freeze_trunk_bn": True, "embedding_dim": 16}
    train = {"batch_size": 8, "iters_per_epoch": 2, "max_epochs": 3, "eval_every": 1, "patience": 5}
    model = {**base, "freeze_trunk_bn_affine": True}
    for warmup, expected in (
        (1, {1: (False, False, False), 2: (True, True, True), 3: (True, True, True)}),
        (0, {1: (False, False, True), 2: (False, False, True), 3: (False, False, True)}),
    ):
        seen.clear()
        config = config_from_mapping({"model": model, "train": train})
        data = _data()
        train_with_loss(
            config=config,
            loss_name="contrastive",
            loss_params={},
            train=data,
            val=data,
            augment=None,
            seed=5,
            device=torch.device("cpu"),
            optimizer="adamw",
            prefetch_depth=0,
            loop=LoopOptions(warmup_epochs=warmup),
        )
        assert seen == expected, (warmup, seen)


def test_bad_option_values_are_config_errors() -> None:
    for key, value in (("model.pooling", "max"), ("model.embedder_init", "xavier")):
        section, name = key.split(".")
        data: dict[str, dict[str, object]] = {"model": {"trunk": "smallcnn", "pretrained": False}}
        data[section] = {**data.get(section, {}), name: value}
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate_common(config_from_mapping(data), {})
    # The loop options are the protocol's settings, checked when its config is resolved.
    for setting, bad in (("lr_decay_gamma", 0.0), ("clip_grad_value", -1.0), ("warmup_epochs", -1)):
        with pytest.raises(ConfigError, match=rf"settings\.{setting} must be"):
            resolve_run_config(load_protocol_file("traditional"), {}, {f"settings.{setting}": bad})


@pytest.mark.slow
def test_smoke_run_on_sop_layout_states_what_the_budget_changes(tmp_path: Path) -> None:
    sop = make_sop_tree(tmp_path / "data")
    args = ["run", "--protocol", "traditional", "--loss", "proxyanchor", "--budget", "smoke", "--quiet"]
    args += ["--dataset", "sop", "--data-dir", str(sop), "--out", str(tmp_path / "runs")]
    args += ["--results-dir", str(tmp_path / "results")]
    proc = dmlbench(*args, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = (tmp_path / "results" / "sop" / "traditional" / "records").glob("*.json")
    rec = json.loads(record.read_text())
    devs = {d["key"]: (d["paper"], d["value"]) for d in rec["deviations"]}
    assert devs["settings.train_classes"] == (11318, 0)
    assert devs["settings.warmup_epochs"] == (1, 0)
    # SOP's paper value is the authors' --bn-freeze 0 (gamma/beta train), as the CPU budget's.
    assert rec["config"]["model"]["freeze_trunk_bn_affine"] is False
    # Kept from the authors' loop on the CPU budget: no deviation recorded for them.
    kept_keys = ("model.pooling", "model.embedder_init", "settings.clip_grad_value", "settings.lr_decay_step")
    for kept in (*kept_keys, "model.freeze_trunk_bn_affine", "train.lr", "settings.lr_decay_gamma"):
        assert kept not in devs
    assert rec["config"]["model"]["pooling"] == "avg+max"
    smoke = budget_overrides("smoke", "traditional")
    assert smoke["settings.train_classes"] == 0
    config, paper = resolve_run_config(
        load_protocol_file("traditional"), smoke, {"data.dataset": "sop"}, dataset_paper_settings
    )
    assert {d.key for d in deviations(config, paper)} >= {"settings.train_classes", "settings.warmup_epochs"}


def make_inshop_tree(root: Path, n_train: int = 24, n_test: int = 12) -> Path:
    """In-shop Clothes Retrieval Benchmark: Eval/list_eval_partition.txt and Img/img/..., with
    ``n_train`` training items (4 images each) and ``n_test`` items split into 2 query and 3
    gallery images each; item ids of both kinds interleave, as in the real file."""
    shop = root / "In-shop Clothes Retrieval Benchmark"
    rng = np.random.default_rng(3)
    rows: list[tuple[str, str, str]] = []
    kinds = ["train"] * n_train + ["test"] * n_test
    for item, kind in enumerate(rng.permutation(kinds).tolist(), start=1):
        base = rng.integers(0, 255, 3)
        statuses = ["train"] * 4 if kind == "train" else ["query"] * 2 + ["gallery"] * 3
        for k, status in enumerate(statuses):
            rel = f"img/WOMEN/Dresses/id_{item:08d}/{k + 1:02d}_{k + 1}_front.jpg"
            (shop / "Img" / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(_pixels(rng, base)).save(shop / "Img" / rel, format="JPEG")
            rows.append((rel, f"id_{item:08d}", status))
    lines = [str(len(rows)), "image_name item_id evaluation_status"]
    lines += [f"{rel:<60}{item:<16}{status}" for rel, item, status in rows]
    (shop / "Eval").mkdir(parents=True)
    (shop / "Eval" / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")
    return shop


def test_query_gallery_metrics_by_hand() -> None:
    """Queries rank the gallery only (nothing excluded); R = the query's gallery images."""
    gallery = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]], dtype=np.float32)
    gallery_labels = np.array([0, 1, 1, 0, 2])
    queries = np.array([[1.0, 0.05], [0.05, 1.0], [0.5, 0.5]], dtype=np.float32)
    query_labels = np.array([0, 1, 3])  # class 3 has no gallery image: left out
    from benchmark.metrics import evaluate_query_gallery

    got = evaluate_query_gallery(
        queries, query_labels, gallery, gallery_labels, "cosine", ["map_at_r", "recall_at_1", "recall_at_2"]
    )
    # Query 0 (class 0, R = 2) ranks gallery 0, 1, 4, 3, 2: hits at 1 -> MAP@R (1/1) / 2 = 0.5.
    # Query 1 (class 1, R = 2) ranks gallery 2, 3, 4, 1, 0: hit at 1 -> 0.5; R@1 1, R@2 1.
    assert got["map_at_r"] == pytest.approx(0.5)
    assert got["recall_at_1"] == pytest.approx(1.0) and got["recall_at_2"] == pytest.approx(1.0)
    # The same embeddings pooled (query = gallery) score differently: the split matters.
    from benchmark.metrics import evaluate

    pooled = evaluate(
        np.concatenate([queries, gallery]),
        np.concatenate([query_labels, gallery_labels]),
        "cosine",
        ["map_at_r"],
    )
    assert pooled["map_at_r"] != pytest.approx(got["map_at_r"])
    with pytest.raises(ValueError, match="nmi"):
        evaluate_query_gallery(queries, query_labels, gallery, gallery_labels, "cosine", ["nmi"])


@pytest.mark.slow
def test_inshop_runs_traditional_with_query_gallery_retrieval(tmp_path: Path) -> None:
    shop = make_inshop_tree(tmp_path / "data")
    args = ["run", "--protocol", "traditional", "--loss", "mfcwms", "--budget", "smoke", "--quiet"]
    args += ["--dataset", "inshop", "--data-dir", str(shop), "--out", str(tmp_path / "runs")]
    args += ["--results-dir", str(tmp_path / "results")]
    proc = dmlbench(*args, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = (tmp_path / "results" / "inshop" / "traditional" / "records").glob("*.json")
    rec = json.loads(record.read_text())
    data = rec["data"]
    assert data["split"] == "official inshop train / query / gallery partitions (list_eval_partition.txt)"
    assert data["retrieval"] == "query -> gallery"
    assert (data["n_train_classes"], data["n_test_classes"]) == (24, 12)
    assert (data["n_train_images"], data["n_query_images"], data["n_gallery_images"]) == (96, 24, 36)
    # The authors' InShop command: lr 6e-4 (mean fields 1.2), decay 20 by 0.25, BatchNorm training.
    assert rec["config"]["train"]["lr"] == 6e-4 and rec["config"]["settings"]["lr_decay_gamma"] == 0.25
    assert rec["config"]["model"]["freeze_trunk_bn"] is False
    assert {d["key"] for d in rec["deviations"]}.isdisjoint({"train.lr", "model.freeze_trunk_bn"})
    for rep in rec["test"]["rep_details"]:
        assert 0.0 <= rep["scores"]["test"]["map_at_r"] <= 1.0
    # A class cut cannot be combined with the official partitions.
    bad = dmlbench(*args, "--set", "settings.train_classes=10", cache=tmp_path / "cache")
    assert bad.returncode != 0 and "official train/query/gallery partitions" in bad.stderr
