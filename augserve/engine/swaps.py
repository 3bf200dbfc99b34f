"""Order one iteration's KV block copies so no copy overwrites a block still to be read."""

from __future__ import annotations

from collections.abc import Sequence


def order_swaps(
    swap_out: Sequence[tuple[int, int]], swap_in: Sequence[tuple[int, int]]
) -> list[tuple[str, list[tuple[int, int]]]]:
    """Group the moves into batches ("out" device->host, "in" host->device) so that a
    block freed by one move and reused as the target of another is read first. The
    scheduler's own order has no cycles, so this always terminates."""
    moves = [("out", p) for p in swap_out] + [("in", p) for p in swap_in]
    batches: list[tuple[str, list[tuple[int, int]]]] = []
    while moves:
        reads = {("dev" if k == "out" else "host", p[0]) for k, p in moves}
        ready_out = [p for k, p in moves if k == "out" and ("host", p[1]) not in reads]
        ready_in = [p for k, p in moves if k == "in" and ("dev", p[1]) not in reads]
        if not ready_out and not ready_in:
            raise RuntimeError("cyclic swap plan")
        if ready_out:
            batches.append(("out", ready_out))
        if ready_in:
            batches.append(("in", ready_in))
        done = {("out", p) for p in ready_out} | {("in", p) for p in ready_in}
        moves = [m for m in moves if m not in done]
    return batches
