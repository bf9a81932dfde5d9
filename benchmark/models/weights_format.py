"""Whether a trunk weights file is in a format torch can read, told from its first bytes (torch-free).

``dmlbench run`` checks ``--trunk-weights`` with :func:`check_weights_format` before importing
torch, so a text file, an empty file or another program's archive passed by mistake is reported in a
fraction of a second. Whether the file holds a state dict, and whether its keys fit the trunk, can
only be told by unpickling it, which needs torch (:func:`benchmark.models.trunks.check_weights_file`,
called right after, still before any data is loaded).
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

from benchmark.errors import ConfigError

#: The first bytes of a zip archive: torch.save's format since PyTorch 1.6.
ZIP_MAGIC = b"PK\x03\x04"
#: The first bytes of torch.save's legacy format (``_use_new_zipfile_serialization=False``): pickle
#: protocol 2 of the integer 0x1950a86a20f9469cfc6c, torch's magic number.
LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
#: safetensors: an 8-byte little-endian header length, then that many bytes of JSON.
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors library's own limit

_EXPECTED = "expected a state dict saved with torch.save (.pth/.pt) or a .safetensors file"


def check_weights_format(path: Path) -> None:
    """ConfigError naming ``path`` unless it looks like a torch.save or safetensors file.

    torch.save files are told by their first bytes (a zip archive holding ``data.pkl`` and
    ``version``, or the legacy format's magic number); ``.safetensors`` files by their header.
    """
    if not path.is_file():
        raise ConfigError(f"--trunk-weights / model.trunk_weights: no such file {str(path)!r}.")
    size = path.stat().st_size
    if size == 0:
        raise ConfigError(f"Trunk weights file {path} is empty (0 bytes); {_EXPECTED}.")
    with path.open("rb") as fh:
        head = fh.read(len(LEGACY_MAGIC))
    if path.suffix == ".safetensors":
        _check_safetensors(path, size)
        return
    if head.startswith(ZIP_MAGIC):
        _check_torch_zip(path)
        return
    if head == LEGACY_MAGIC:
        return
    if head.startswith(b"\x80"):  # pickle's PROTO opcode: pickle.dump, not torch.save
        what = f"a plain pickle, not torch.save's format: it starts with {head[:8]!r}"
    else:
        what = f"it starts with {head[:8]!r}: neither torch.save's zip archive nor its legacy format"
    raise ConfigError(f"Trunk weights file {path} is not a PyTorch checkpoint ({what}); {_EXPECTED}.")


def _check_torch_zip(path: Path) -> None:
    """A torch.save zip holds ``<name>/data.pkl`` and ``<name>/version``."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(
            f"Trunk weights file {path} is not a PyTorch checkpoint (a damaged zip archive: {exc}); "
            f"{_EXPECTED}."
        ) from exc
    folders = {name.split("/", 1)[0] for name in names if name.endswith("/data.pkl")}
    if not any(f"{folder}/version" in names for folder in folders):
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(
            f"Trunk weights file {path} is a zip archive but not a PyTorch checkpoint (torch.save's "
            f"archives hold <name>/data.pkl and <name>/version; this one holds {shown or 'nothing'}); "
            f"{_EXPECTED}."
        )


def _check_safetensors(path: Path, size: int) -> None:
    """A safetensors file starts with its header's length (8 bytes) and the header, a JSON object."""
    with path.open("rb") as fh:
        prefix = fh.read(9)
    length = struct.unpack("<Q", prefix[:8])[0] if len(prefix) >= 8 else -1
    if not 2 <= length <= min(size - 8, SAFETENSORS_MAX_HEADER) or prefix[8:9] != b"{":
        raise ConfigError(
            f"Trunk weights file {path} is not a readable safetensors file (its first bytes "
            f"{prefix!r} are not an 8-byte header length followed by a JSON header); {_EXPECTED}."
        )
