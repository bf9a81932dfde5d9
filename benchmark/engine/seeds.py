"""Explicit seed derivation: every sampler, split and model seed is a pure function of the run seed."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(run_seed: int, *keys: int | str) -> int:
    """A 31-bit seed determined by the run seed and a path of keys (stage, trial, rep, fold)."""
    words = [run_seed] + [k if isinstance(k, int) else _str_key(k) for k in keys]
    return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


def _str_key(text: str) -> int:
    # Python's hash() is salted per process; a digest keeps seeds identical across processes.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
