"""CUDA graphs for decode-only steps (CUDA only; the engine's GPU path).

On a GPU a decode step of a small model is bound by host work: one Python call
and a few kernel launches per layer. Capturing the step's forward pass once per
shape and replaying it removes that. As in vLLM, a captured step has a fixed
batch size and block-table width, so both are rounded up to buckets: the batch
to 1, 2, 4, 8 then multiples of 16, the width to a power of two. The rows and
columns added by the rounding point at a scratch block that no sequence owns
(the KV cache keeps one aside), so padded rows write their K/V there and never
touch a real sequence's blocks.

Graphs are captured lazily, the first time a shape is seen, into one shared
memory pool; the inputs of every graph are views of the same static buffers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from augserve.engine.attention import AttentionMetadata

Forward = Callable[..., torch.Tensor]


def batch_bucket(n: int, max_batch: int) -> int | None:
    """The captured batch size a step of n decodes runs at (None: larger than any)."""
    for b in (1, 2, 4, 8):
        if n <= b <= max_batch:
            return b
    b = (n + 15) // 16 * 16
    return b if b <= max_batch else None


def width_bucket(w: int, max_width: int) -> int | None:
    """The captured block-table width for a step whose longest table is w blocks."""
    b = 2
    while b < w:
        b *= 2
    b = min(b, max_width)
    return b if b >= w else None


class DecodeGraphs:
    """Capture-on-first-use CUDA graphs of `forward` for decode-only steps."""

    def __init__(
        self,
        forward: Forward,
        caches: tuple[list[torch.Tensor], list[torch.Tensor]],
        scratch_block: int,
        block_size: int,
        max_batch: int,
        max_width: int,
        device: torch.device,
        compiled: bool = False,
    ) -> None:
        self.forward, self.caches, self.compiled = forward, caches, compiled
        self.block_size, self.max_batch, self.max_width = block_size, max_batch, max_width
        self.scratch = scratch_block

        def buf(*shape: int) -> torch.Tensor:  # a static input (filled by `_pad`)
            return torch.zeros(shape, dtype=torch.long, device=device)

        self.ids, self.pos, self.slots, self.lens = (buf(max_batch) for _ in range(4))
        self.tables = buf(max_batch, max_width)
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def _pad(self) -> None:
        """Every row and column points at the scratch block (padding's state)."""
        self.ids.zero_()
        self.pos.zero_()
        self.slots.fill_(self.scratch * self.block_size)
        self.lens.fill_(1)
        self.tables.fill_(self.scratch)

    def _meta(self, b: int, w: int) -> AttentionMetadata:
        return AttentionMetadata(
            self.slots[:b], b, self.tables[:b, :w], self.lens[:b], [], self.block_size,
            self.compiled,
        )  # fmt: skip

    def _capture(self, b: int, w: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        self._pad()
        args = (self.ids[:b], self.pos[:b], self._meta(b, w), *self.caches)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call,unused-ignore]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture (lazy init, autotuning)
            for _ in range(2):
                self.forward(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.forward(*args)
        return graph, out

    def run(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor | None:
        """Hidden states [n, hidden] of a decode-only step, or None when its shape is
        beyond the captured range (the caller runs it eagerly)."""
        tables, lens = meta.decode_block_tables, meta.decode_ctx_lens
        assert tables is not None and lens is not None and not meta.prefills
        n, w = tables.shape
        b, wb = batch_bucket(n, self.max_batch), width_bucket(w, self.max_width)
        if b is None or wb is None:
            return None
        key = (b, wb)
        if key not in self.graphs:
            self.graphs[key] = self._capture(b, wb)
        graph, out = self.graphs[key]
        self._pad()
        self.ids[:n].copy_(input_ids)
        self.pos[:n].copy_(positions)
        self.slots[:n].copy_(meta.slot_mapping)
        self.lens[:n].copy_(lens)
        self.tables[:n, :w].copy_(tables)
        graph.replay()
        return out[:n]
