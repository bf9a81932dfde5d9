"""Kill points (benchmark/faults.py): which names a DMLBENCH_KILL_AT value stops at, and with what."""

from __future__ import annotations

import signal

import pytest

from benchmark import faults


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The signals kill points send to this process (recorded, not delivered)."""
    out: list[int] = []
    monkeypatch.setattr("benchmark.faults.os.kill", lambda pid, sig: out.append(sig))
    monkeypatch.delenv(faults.SIGNAL_ENV, raising=False)
    return out


@pytest.mark.parametrize(
    ("at", "name", "fires"),
    [
        ("search.trial_told:2", "search.trial_told:2", True),
        ("search.trial_told:2", "search.trial_told:12", False),
        ("search.fold_done:*", "search.fold_done:7:3", True),  # any trial's first fold
        ("search.fold_done:*:0", "search.fold_done:7:3", False),
        ("write:rep0-fold1.json", "write:rep0-fold1.json", True),
        ("write:rep0-fold1.json", "write:rep0-fold10json", False),  # the dot is literal
    ],
)
def test_a_kill_point_fires_on_its_exact_name_or_a_matching_pattern(
    sent: list[int], monkeypatch: pytest.MonkeyPatch, at: str, name: str, fires: bool
) -> None:
    monkeypatch.setenv(faults.ENV, at)
    faults.kill_point(name)
    assert sent == ([signal.SIGKILL] if fires else [])


def test_unset_fires_nowhere_and_the_signal_is_chosen_by_name(
    sent: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.kill_point("record.run_dir")
    assert sent == []
    monkeypatch.setenv(faults.ENV, "record.run_dir")
    for name, sig in faults.SIGNALS.items():
        monkeypatch.setenv(faults.SIGNAL_ENV, name)
        faults.kill_point("record.run_dir")
        assert sent[-1] == sig
    assert faults.SIGNALS["STOP"] == signal.SIGSTOP
