"""Compiled grammars kept by recent use, bounded by their bytes.

A compiled xgrammar grammar holds its adaptive token masks: a small schema costs
about 0.5 MB, a 20,000-value enum 45 MB. Distinct schemas from clients would grow
an unbounded cache for ever, so `GrammarCache` keeps the most recently used ones
up to `max_bytes` (each entry's size is xgrammar's `memory_size_bytes`, or an
estimate from the grammar's source where the object does not say, plus what that
figure leaves out) and drops the least recently used past it. An entry larger than
the whole bound is not kept.
Thread-safe: the server compiles on its preparation threads, the engine on its.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, TypeVar

K = TypeVar("K")

DEFAULT_BYTES = 256 * 2**20
_BYTES_PER_SOURCE_CHAR = 256  # a rough size where xgrammar gives none
# What `memory_size_bytes` leaves out, per entry: the compiled grammar's other native
# parts and the cache key's Python objects. Measured on a small schema: 2.2 KiB of
# glibc heap beyond xgrammar's figure and ~9 Python blocks; rounded up.
ENTRY_OVERHEAD_BYTES = 4096


def engine_cache_bytes(engine: Any) -> int:
    """Bytes held by `engine`'s grammar cache; 0 before its masker is first built."""
    masker = getattr(getattr(engine, "masker", None), "built", None)
    cache = getattr(masker, "cache", None)
    return int(cache.bytes) if cache is not None else 0


def grammar_bytes(compiled: Any, source: str = "") -> int:
    """The memory a compiled grammar holds (xgrammar's figure, else an estimate)."""
    size = getattr(compiled, "memory_size_bytes", None)
    if not (isinstance(size, int) and size > 0):
        size = max(1, len(source)) * _BYTES_PER_SOURCE_CHAR
    return size + ENTRY_OVERHEAD_BYTES


class GrammarCache(Generic[K]):
    """An LRU map of compiled grammars whose sizes sum to at most `max_bytes`."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evictions = 0
        self._items: OrderedDict[K, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, compiled: Any, size: int) -> None:
        """Keep `compiled` (of `size` bytes), dropping the least recently used past the
        bound; one larger than the bound is not kept."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return
            self._items[key] = (compiled, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.bytes -= dropped
                self.evictions += 1
