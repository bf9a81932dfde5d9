"""The plugin contracts of :mod:`benchmark.testing`, used as a plugin's own repository uses them.

The example loss plugin (examples/my_loss) runs the loss contract through the pytest class a
plugin author subclasses; every registered dataset that can be loaded here runs the dataset
contract (iterating the registry: a dataset that needs files is run where they are, omniglot on
the shared data). Every registered loss runs the loss contract in tests/test_losses_contract.py.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import OMNIGLOT, REPO

from benchmark.data import DATASETS, DatasetOptions, DatasetSpec
from benchmark.losses import LossSpec
from benchmark.testing.datasets import DATASET_CHECKS, DatasetContract
from benchmark.testing.losses import LOSS_CHECKS, LossContract, check_permuting_the_batch, loss_spec_of

EXAMPLE = REPO / "examples" / "my_loss" / "my_loss.py"


def _example_loss_class() -> type:
    # Imported from its file, not registered: the registry of this process stays the built-ins'.
    spec = importlib.util.spec_from_file_location("contract_example_my_loss", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type = module.MarginDevianceLoss
    return cls


class TestExampleLossPlugin(LossContract):
    loss = _example_loss_class()


def test_the_loss_contract_class_runs_every_check() -> None:
    # The pytest class and the list of checks are one contract: a check added to one is in both.
    tests = {n.removeprefix("test_") for n in dir(LossContract) if n.startswith("test_")}
    assert tests == {c.__name__.removeprefix("check_") for c in LOSS_CHECKS}
    tests = {n.removeprefix("test_") for n in dir(DatasetContract) if n.startswith("test_")}
    assert tests == {c.__name__.removeprefix("check_") for c in DATASET_CHECKS}


def test_the_loss_contract_catches_a_broken_loss() -> None:
    # The contract can fail: a loss that reads the first row of the batch depends on its order.
    import torch
    from torch import nn

    class OrderDependent(nn.Module):
        name = "orderdependent"
        defaults = {"margin": 0.5}  # noqa: RUF012
        search_space = {"margin": (0.0, 1.0)}  # noqa: RUF012
        pair_based = True
        embedding_space = "euclidean"

        def __init__(self, ctx: object, params: dict[str, float]) -> None:
            super().__init__()

        def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return (embeddings[0] ** 2).sum()

    spec: LossSpec = loss_spec_of(OrderDependent)
    with pytest.raises(AssertionError, match="orderdependent: the value depends on the order"):
        check_permuting_the_batch(spec)


def _dataset_options(spec: DatasetSpec, cache: Path) -> DatasetOptions | None:
    """Options that load ``spec`` here, or None where its files are absent."""
    if not spec.requires_data_dir:
        return DatasetOptions(None, 28, cache)
    if spec.name == "omniglot" and OMNIGLOT.is_dir():
        return DatasetOptions(OMNIGLOT, 28, cache)
    return None


@pytest.mark.parametrize("check", DATASET_CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", DATASETS.names())
def test_dataset_contract(
    name: str, check: Callable[[DatasetSpec, DatasetOptions], None], cache_dir: Path
) -> None:
    spec = DATASETS.get(name)
    options = _dataset_options(spec, cache_dir)
    if options is None:
        if check.__name__ == "check_declaration":
            check(spec, DatasetOptions(None, 28, cache_dir))  # the declaration needs no files
            return
        pytest.skip(f"{name} reads files that are not on this machine")
    check(spec, options)


def test_the_declaration_check_knows_each_protocols_own_settings() -> None:
    from dataclasses import replace

    from benchmark.testing.datasets import check_declaration

    sop = DATASETS.get("sop")
    check_declaration(sop)  # its traditional paper values name traditional's settings.* keys
    bad = replace(sop, protocol_settings={"traditional": {"settings.train_clases": 11318}})
    with pytest.raises(AssertionError, match=re.escape("unknown keys ['settings.train_clases']")):
        check_declaration(bad)
    # A key of another protocol's [settings] block is unknown here too.
    other = replace(sop, protocol_settings={"mlrc": {"settings.train_classes": 11318}})
    with pytest.raises(AssertionError, match=re.escape("unknown keys ['settings.train_classes']")):
        check_declaration(other)
