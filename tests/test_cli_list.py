"""`dmlbench list`: one kind, a usage message otherwise, and no traceback on a closed pipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.cli.list_cmd import KINDS
from benchmark.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv", [["list"], ["list", "losses", "metrics"]])
def test_list_needs_exactly_one_kind(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "takes one kind" in err and all(kind in err for kind in KINDS)
    assert "Traceback" not in err


def test_list_into_a_closed_pipe_is_quiet() -> None:
    """As `dmlbench list losses | head -0`: the reader is gone before the first write."""
    script = (
        "import sys\n"
        "from benchmark.cli.main import main\n"
        "sys.stdin.readline()  # wait until the parent has closed the pipe\n"
        "sys.exit(main(['list', 'losses']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.close()  # the reader goes away before the writer writes
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    err = proc.stderr.read() if proc.stderr is not None else b""
    proc.wait(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err
