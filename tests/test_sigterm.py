"""SIGTERM while the CLI runs is an interruption like Ctrl-C (benchmark.cli.main.sigterm_as_interrupt)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from benchmark.cli import list_cmd
from benchmark.cli import main as cli_main
from benchmark.cli.main import Terminated, sigterm_as_interrupt


def test_sigterm_inside_the_block_raises_terminated_and_the_handler_is_restored_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before
    assert issubclass(Terminated, KeyboardInterrupt)  # every Ctrl-C clean-up path catches it


def test_a_sigterm_ignored_by_the_caller_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: nothing is raised
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []

    def body() -> None:
        with sigterm_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [(Terminated(), 143, "terminated (SIGTERM)"), (KeyboardInterrupt(), 130, "interrupted")],
)
def test_main_reports_the_stop_and_exits_with_the_shell_convention(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    code: int,
    said: str,
) -> None:
    def handle(args: object) -> int:
        raise raised

    monkeypatch.setattr(list_cmd, "handle", handle)  # the parser is built after: it binds this one
    assert cli_main.main(["list", "losses"]) == code
    assert f"dmlbench: {said}. Finished trials" in capsys.readouterr().err
