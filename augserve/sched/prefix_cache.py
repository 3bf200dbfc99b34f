"""Automatic prefix caching, as vLLM v1 does it (docs/design.md, KV that outlives a request).

A full block is named by a hash of its tokens chained to the previous block's
hash, so two contexts share a block exactly when they share every token up to
its end. Blocks are registered in the pool (`DeviceBlocks.cache_block`) once
their KV is computed; when the last request holding a block lets it go, the
block stays cached free (counted as free memory, evicted least recently freed
first) until an allocation needs it. A request that holds no KV looks its
context up before it is admitted (`take_hit`): the longest run of cached
blocks from the start, always leaving at least the last token to compute (its
logits are needed), goes into its block table and `num_computed_tokens`
starts after it.

Tenants: a request's `cache_salt` (the server's hash of its API key and of the
request's own `cache_salt`, as vLLM's) starts its chain, so a block is shared only
by requests of the same salt: `cached_tokens` never reveals another tenant's
prompt. Requests without a salt (the simulator's) share one chain.

Token identities: the engine's requests carry their real token ids; the
simulator's requests of an agent session carry the session's synthetic ids
(`core/token_ids.py`), so a later turn hits what an earlier one computed. A
request that carries no ids at all (a trace of lengths only), or filler ids that
stand in for unknown content (`opaque_tokens`: a trace replayed on the engine),
is named by its own id and block index: it can hit only its own blocks, e.g.
after a discard, in the simulator and the engine alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from augserve.core.block_pool import BlockPool
from augserve.core.request import Request

_ROOT = 0x9E3779B97F4A7C15  # the parent hash of a context's first block
_OWN = "own"  # salt of the hashes of requests without token ids


def chain_root(salt: str | None) -> int:
    """The parent hash of a context's first block: one per salt (tenant)."""
    return _ROOT if salt is None else hash((_ROOT, salt))


@dataclass
class PrefixCacheStats:
    """Tokens looked up at admission and tokens found (vLLM's prefix cache hit rate)."""

    queries: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class PrefixCache:
    """Block hashing, lookup and registration over a `BlockPool`'s device blocks."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.device = pool.device
        self.block_size = pool.block_size
        self.stats = PrefixCacheStats()

    def block_hash(self, req: Request, index: int) -> int:
        """The hash of the request's full block `index` (memoized on the request)."""
        hashes, bs, ids = req.block_hashes, self.block_size, req.token_ids
        while len(hashes) <= index:
            j = len(hashes)
            if ids is None or req.opaque_tokens:
                hashes.append(hash((_OWN, req.request_id, j)))
            else:
                parent = hashes[-1] if hashes else chain_root(req.cache_salt)
                hashes.append(hash((parent, *ids[j * bs : (j + 1) * bs])))
        return hashes[index]

    def match(self, req: Request) -> list[int]:
        """Cached device blocks holding the longest prefix of the context, leaving at
        least its last token uncomputed."""
        bs = self.block_size
        limit = (req.num_tokens - 1) // bs
        if req.token_ids is not None and not req.opaque_tokens:
            limit = min(limit, len(req.token_ids) // bs)
        cached = self.device.cached
        hit: list[int] = []
        for i in range(limit):
            block = cached.get(self.block_hash(req, i))
            if block is None:
                break
            hit.append(block)
        return hit

    def peek_tokens(self, req: Request) -> int:
        """Tokens of the context a lookup would find now (nothing is taken)."""
        return len(self.match(req)) * self.block_size

    def take_hit(self, req: Request) -> int:
        """Give a request without KV its cached prefix; returns the tokens hit."""
        hit = self.match(req)
        self.device.touch(hit)
        req.block_ids = hit
        req.num_hashed_blocks = len(hit)
        req.num_cached_tokens = 0  # admitted: the hit is in num_computed_tokens now
        req.num_computed_tokens = tokens = len(hit) * self.block_size
        return tokens

    def count(self, req: Request, hit_tokens: int) -> None:
        """The request was admitted with `hit_tokens` of its context cached."""
        self.stats.queries += req.num_tokens
        self.stats.hits += hit_tokens
        if req.first_scheduled_time is None:  # OpenAI's usage.prompt_tokens_details
            req.num_cached_prompt_tokens = min(hit_tokens, req.prompt_len)

    def cache_computed(self, req: Request) -> None:
        """Register the request's full device blocks whose KV is computed."""
        full = min(req.num_computed_tokens // self.block_size, len(req.block_ids))
        blocks, cache_block = req.block_ids, self.device.cache_block
        for i in range(req.num_hashed_blocks, full):
            cache_block(blocks[i], self.block_hash(req, i))
        req.num_hashed_blocks = max(full, req.num_hashed_blocks)
