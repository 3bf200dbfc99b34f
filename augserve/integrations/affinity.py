"""Session affinity under vLLM's data parallelism: every turn of a session on one rank.

With `--data-parallel-size N` vLLM runs one engine core, so one scheduler and one
KV cache, per rank, and sends a new request to the least loaded rank. A session's
next turn then lands, often, on a rank that holds none of its KV (neither its
prefix-cache blocks nor a paused streaming session), and our scheduler there has
never seen its earlier turns. vLLM honours a rank chosen by the client: the
`X-data-parallel-rank` header of its OpenAI server, or `data_parallel_rank` of
`AsyncLLM.generate`. `session_rank` picks it from the session id by a stable hash
(the same in every client, router and process), so a conversation keeps to its
rank; the price is that load balancing between ranks is by sessions, not requests.
"""

from __future__ import annotations

import hashlib

RANK_HEADER = "X-data-parallel-rank"


def session_rank(session_id: str, data_parallel_size: int) -> int:
    """The rank in [0, data_parallel_size) that serves every turn of `session_id`."""
    if data_parallel_size <= 0:
        raise ValueError(f"data_parallel_size must be > 0, got {data_parallel_size}")
    if not session_id:
        raise ValueError("session_id must be a non-empty string")
    digest = hashlib.blake2b(session_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % data_parallel_size


def affinity_headers(session_id: str, data_parallel_size: int) -> dict[str, str]:
    """The HTTP headers that pin a request of `session_id` to its rank."""
    return {RANK_HEADER: str(session_rank(session_id, data_parallel_size))}
