"""Synthetic token identities, for executors that do not run a model (the simulator).

A session's context is one stream of tokens; position `p` of the stream of
`key` always holds the same id. A workload gives each turn of a session the
stream's first `prompt_len` ids as its prompt, and the simulator reports the
stream's id at each position it generates or appends, so a later turn's prompt
repeats exactly what an earlier turn computed, and the prefix cache hits in
the simulator where it would in the engine.
"""

from __future__ import annotations

import zlib

SYNTHETIC_VOCAB = 50_000


def _seed(key: str) -> int:
    return zlib.crc32(key.encode())


def synthetic_token(key: str, position: int) -> int:
    """The id at `position` of the stream of `key` (deterministic across processes)."""
    return (_seed(key) * 1_000_003 + position * 2_654_435_761) % SYNTHETIC_VOCAB


def synthetic_token_ids(key: str, start: int, end: int) -> list[int]:
    """Ids at positions [start, end) of the stream of `key`."""
    s = _seed(key) * 1_000_003
    return [(s + p * 2_654_435_761) % SYNTHETIC_VOCAB for p in range(start, end)]
