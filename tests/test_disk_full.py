"""A full disk is a one-line error (exit 2) naming the file and the bytes it needed; nothing is
half-written, and the resumed run's record equals an uninterrupted run's."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from test_kill_points import ARGS, comparable, dmlbench, record

import benchmark.io
from benchmark.cli.main import main
from benchmark.errors import DiskFull
from benchmark.io import atomic_write, write_json_atomic


def enospc(*_: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_fsync_leaves_the_old_file_and_names_path_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    write_json_atomic(path, {"old": 1})
    before = path.read_bytes()
    monkeypatch.setattr(os, "fsync", enospc)  # the os module benchmark.io calls
    data = {"new": "x" * 100}
    with pytest.raises(DiskFull) as info:
        write_json_atomic(path, data)
    size = len((json.dumps(data, indent=1) + "\n").encode())
    assert f"No space left to write {path} ({size:,} bytes)" in str(info.value)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]  # no temporary file left


def test_a_full_disk_in_the_write_itself_states_the_given_size(tmp_path: Path) -> None:
    path = tmp_path / "rep0-fold1.npy"
    with pytest.raises(DiskFull, match=re.escape(f"{path} (4,224 bytes)")), atomic_write(path, 4224) as fh:
        np.save(fh, np.zeros(1024, dtype=np.float32))
        raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_another_os_error_is_not_called_a_full_disk(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), atomic_write(tmp_path / "x.json"):
        raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.slow
def test_run_on_a_full_disk_exits_2_then_resumes_to_the_uninterrupted_record(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "full"
    argv = [*ARGS, "--out", str(root / "runs"), "--results-dir", str(root / "results")]
    # The disk fills at a test fold's .npy save, then at the run-dir record: each kind of write.
    for target, pattern in (
        ("write:rep0-fold1.npy", r"rep0-fold1\.npy \([\d,]+ bytes\)"),
        ("write:record.json", r"record\.json \([\d,]+ bytes\)"),
    ):

        def full_at(name: str, target: str = target) -> None:
            if name == target:
                enospc()

        monkeypatch.setattr(benchmark.io, "kill_point", full_at)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip().count("\n") == 0, err
        assert err.strip().startswith("dmlbench: error: No space left to write ")
        assert re.search(pattern, err), err
    monkeypatch.undo()
    assert main(argv) == 0
    capsys.readouterr()
    reference = dmlbench(tmp_path / "reference", cache_dir)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert comparable(record(root)) == comparable(record(tmp_path / "reference"))
