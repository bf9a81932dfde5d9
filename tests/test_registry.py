"""Registries: duplicate and unknown names are errors; `dmlbench list` prints every kind."""

from __future__ import annotations

import pytest

from benchmark.cli import list_cmd
from benchmark.cli.main import main
from benchmark.errors import DmlbenchError, UnknownNameError
from benchmark.losses import LOSSES
from benchmark.registry import Registry


def test_duplicate_name_is_an_error() -> None:
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    with pytest.raises(DmlbenchError, match="Duplicate thing name 'a'"):
        reg.register("a", 2)


def test_unknown_name_lists_choices_and_suggests() -> None:
    reg: Registry[int] = Registry("thing")
    for name in ("alpha", "beta"):
        reg.register(name, 0)
    with pytest.raises(UnknownNameError, match=r"Did you mean 'alpha'\?.*Valid choices: alpha, beta"):
        reg.get("alpah")


@pytest.mark.parametrize("kind", list(list_cmd.KINDS))
def test_list_every_kind(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", kind]) == 0
    assert capsys.readouterr().out.strip()


def test_list_losses_shows_every_loss_with_search_space(capsys: pytest.CaptureFixture[str]) -> None:
    main(["list", "losses"])
    out = capsys.readouterr().out
    for name, spec in LOSSES.items():
        assert f"\n{name} " in "\n" + out
        for key in spec.search_space:
            assert key in out


def test_list_unknown_kind_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "lossez"]) == 2
    assert "Did you mean 'losses'" in capsys.readouterr().err
