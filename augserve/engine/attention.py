"""Paged attention over a block-table KV cache, for mixed prefill/decode batches.

A step's tokens are flattened: first the decode tokens (one per sequence),
then each prefill chunk's tokens. Every layer writes the new K/V into the
cache slots (`slot_mapping`), then attends:

- decodes: all sequences at once, reading K/V in place through the block table:
  on the CPU the native kernel (`native/attention.py`) where it builds, else
  `attention_cpu.decode_cpu`; `decode_paged` block by block, with no padded copy of
  the context once the kernel is compiled (`build_metadata(..., compiled=True)`, or traced into
  the runner's whole-model decode graph): inductor fuses the block-table
  indexing into the score and value reductions. `decode_reference` is the plain
  gather-then-attend version the tests compare against. On CUDA with fp16/bf16,
  flash-attn's paged kernel when it is installed (untested: the GPU machine lent so
  far has no flash-attn), else the gather + SDPA version, faster there than the
  block-wise kernel (whose math is fp32).
- a fresh prompt chunk (start_pos 0): causal SDPA over its own new K/V.
- a later chunk (start_pos > 0): its context is gathered once and shared by all
  its queries (the gather is amortised over the chunk), then SDPA with a mask.

The cache layout is [num_blocks, block_size, kv_heads, head_dim] (the one
flash-attn's paged kernel reads). The metadata is built once per step by
`build_metadata` and shared by all layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from augserve.engine.attention_cpu import DecodePlan, decode_cpu, decode_plan
from augserve.engine.native import attention as native_attention

try:  # optional fused paged-attention kernel (CUDA only)
    from flash_attn import flash_attn_with_kvcache as _flash_kvcache  # type: ignore[import-not-found]
except Exception:  # noqa: BLE001 - any import failure means "not available"
    _flash_kvcache = None


@dataclass
class PrefillChunkMeta:
    """One prefill chunk: tokens [tok_start, tok_end) of the flat batch."""

    tok_start: int
    tok_end: int
    start_pos: int
    block_ids: torch.Tensor  # [ceil(ctx_len / block_size)] long
    ctx_len: int


@dataclass
class AttentionMetadata:
    """Per-step index tensors shared by all layers."""

    slot_mapping: torch.Tensor  # [T] long, flat cache slot of each new token
    num_decode: int  # first num_decode tokens are single-token decodes
    decode_block_tables: torch.Tensor | None  # [Bd, max_blocks] long, padded with block 0
    decode_ctx_lens: torch.Tensor | None  # [Bd] long, context length incl. the new token
    prefills: list[PrefillChunkMeta]
    block_size: int
    compiled: bool = False  # decodes through the compiled paged kernel
    cpu_plan: DecodePlan | None = None  # eager CPU decodes: set by the step's first layer


def build_metadata(
    decode: list[tuple[int, list[int]]],
    prefill: list[tuple[int, int, list[int]]],
    block_size: int,
    device: torch.device,
    compiled: bool = False,
) -> AttentionMetadata:
    """Build step metadata (one host-to-device copy per index tensor).

    decode: (position, block_table) per single-token sequence.
    prefill: (start_pos, num_tokens, block_table) per chunk, in flat order after decodes.
    compiled: decode with the compiled paged kernel (else the plain reference).
    """
    slots: list[int] = []
    tables = lens = None
    if decode:
        ctx = [pos + 1 for pos, _ in decode]
        # at least 2 columns: a width of 1 would make the compiled kernel specialise
        width = max(2, (max(ctx) + block_size - 1) // block_size)
        rows = [bt[:width] + [0] * (width - len(bt[:width])) for _, bt in decode]
        tables = torch.tensor(rows, dtype=torch.long).to(device, non_blocking=True)
        lens = torch.tensor(ctx, dtype=torch.long).to(device, non_blocking=True)
        slots = [bt[pos // block_size] * block_size + pos % block_size for pos, bt in decode]
    metas: list[PrefillChunkMeta] = []
    tok = len(decode)
    for start, n, bt in prefill:
        ctx_len = start + n
        nblk = (ctx_len + block_size - 1) // block_size
        if nblk > len(bt):
            raise ValueError(f"block table of {len(bt)} blocks too short for {ctx_len} tokens")
        slots += [bt[p // block_size] * block_size + p % block_size for p in range(start, ctx_len)]
        ids = torch.tensor(bt[:nblk], dtype=torch.long).to(device, non_blocking=True)
        metas.append(PrefillChunkMeta(tok, tok + n, start, ids, ctx_len))
        tok += n
    slot_t = torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True)
    return AttentionMetadata(slot_t, len(decode), tables, lens, metas, block_size, compiled)


# --- decode ------------------------------------------------------------------------------
def decode_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q [B, H, D] -> [B, H, D]: attention over each sequence's blocks, block by block.

    Written so that inductor emits two fused loops that index the cache through
    the block table (scores, then per-block partial sums of V) instead of copying
    the context; run eagerly it is a (slow) plain-torch equivalent. fp32 math."""
    b, h, d = q.shape
    bs, kvh = k_cache.shape[1], k_cache.shape[2]
    nb = block_tables.shape[1]
    qg = q.float().view(b, 1, 1, kvh, h // kvh, d)
    k = k_cache[block_tables].unsqueeze(-2)  # [B, nb, bs, kvH, 1, D]
    s = (qg * k.float()).sum(-1) * scale  # [B, nb, bs, kvH, g]
    pos = torch.arange(nb * bs, device=q.device).view(1, nb, bs, 1, 1)
    s = s.masked_fill(pos >= ctx_lens.view(-1, 1, 1, 1, 1), float("-inf"))
    p = (s - s.amax(dim=(1, 2), keepdim=True)).exp()
    den = p.sum(dim=(1, 2))  # [B, kvH, g]
    v = v_cache[block_tables].unsqueeze(-2)  # [B, nb, bs, kvH, 1, D]
    part = (p.unsqueeze(-1) * v.float()).sum(dim=2)  # [B, nb, kvH, g, D]: per block
    out = part.sum(dim=1) / den.unsqueeze(-1)
    return out.view(b, h, d).to(q.dtype)


def decode_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain torch: gather each padded context, mask, SDPA. q [B, H, D] -> [B, H, D]."""
    b, h, d = q.shape
    kvh = k_cache.shape[2]
    c = block_tables.shape[1] * k_cache.shape[1]
    k = k_cache[block_tables].view(b, c, kvh, d).transpose(1, 2)
    v = v_cache[block_tables].view(b, c, kvh, d).transpose(1, 2)
    allowed = torch.arange(c, device=q.device).view(1, 1, 1, c) < ctx_lens.view(-1, 1, 1, 1)
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=allowed, scale=scale, enable_gqa=kvh != h
    )
    return out.squeeze(2)


DecodeFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor
]
_compiled_decode: DecodeFn | None = None


def compiled_decode() -> DecodeFn:
    """decode_paged under torch.compile: one graph per process (per cache shape), the
    batch size and the block-table width dynamic, every other size static."""
    global _compiled_decode
    if _compiled_decode is None:
        from augserve.engine.ops import dynamic_shape_settings, mark_dynamic

        dynamic_shape_settings()
        fn = torch.compile(decode_paged, fullgraph=True)

        def run(
            q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            tables: torch.Tensor, lens: torch.Tensor, scale: float,
        ) -> torch.Tensor:  # fmt: skip
            mark_dynamic(q, lens)
            mark_dynamic(tables, dims=(0, 1))
            return fn(q, k_cache, v_cache, tables, lens, scale)

        _compiled_decode = run
    return _compiled_decode


def _use_flash(device: torch.device, dtype: torch.dtype, block_size: int) -> bool:
    """flash-attn's paged kernel: CUDA, fp16/bf16 and blocks of a multiple of 256 tokens."""
    half = dtype in (torch.float16, torch.bfloat16)
    return _flash_kvcache is not None and device.type == "cuda" and half and block_size % 256 == 0


def _use_gather_sdpa(device: torch.device, dtype: torch.dtype) -> bool:
    """CUDA with fp16/bf16 and no flash-attn: gather + SDPA (its fused half-precision
    kernels) beat the block-wise kernel, whose math is fp32: 0.46 ms against 1.25 ms
    at batch 64, 32 heads, contexts of 1-2k tokens on an H200 (docs/engine-speed.md)."""
    return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)


def decode_backend(
    device: torch.device, dtype: torch.dtype, block_size: int, compiled: bool
) -> str:
    """The decode attention a runner with these settings uses."""
    if _use_flash(device, dtype, block_size):
        return "flash-attn"
    if _use_gather_sdpa(device, dtype):
        return "gather-sdpa"
    if compiled:
        return "paged-compiled"
    if device.type != "cpu":
        return "reference"
    native = native_attention.ENABLED[0] and dtype in native_attention.CACHE_KINDS
    return "cpu-native" if native and native_attention.isa_or_none() else "cpu-bmm"


def _decode(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # fmt: skip
    tables, lens = meta.decode_block_tables, meta.decode_ctx_lens
    assert tables is not None and lens is not None
    if _use_flash(q.device, q.dtype, meta.block_size):  # UNTESTED (flash-attn not installed)
        assert _flash_kvcache is not None
        out = _flash_kvcache(
            q.unsqueeze(1), k_cache, v_cache, cache_seqlens=lens.to(torch.int32),
            block_table=tables.to(torch.int32), softmax_scale=scale, causal=True,
        )  # fmt: skip
        squeezed: torch.Tensor = out.squeeze(1)
        return squeezed
    if _use_gather_sdpa(q.device, q.dtype):
        return decode_reference(q, k_cache, v_cache, tables, lens, scale)
    if torch.compiler.is_compiling():  # traced into a larger compiled graph
        return decode_paged(q, k_cache, v_cache, tables, lens, scale)
    if meta.compiled:
        return compiled_decode()(q, k_cache, v_cache, tables, lens, scale)
    if native_attention.usable(q, k_cache):  # native/attention.py: the cache read in place
        return native_attention.decode(q, k_cache, v_cache, tables, lens, scale)
    if q.device.type == "cpu":  # attention_cpu.py: batched matmuls, planned once a step
        if meta.cpu_plan is None:
            meta.cpu_plan = decode_plan(tables, lens, meta.block_size)
        return decode_cpu(q, k_cache, v_cache, meta.cpu_plan, scale)
    return decode_reference(q, k_cache, v_cache, tables, lens, scale)


# --- prefill -----------------------------------------------------------------------------
def _gather(cache: torch.Tensor, block_ids: torch.Tensor, ctx_len: int) -> torch.Tensor:
    """[num_blocks, bs, kvH, D] + block ids -> [1, kvH, ctx_len, D]."""
    g = cache.index_select(0, block_ids).flatten(0, 1)[:ctx_len]
    return g.transpose(0, 1).unsqueeze(0)


def _prefill(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    c: PrefillChunkMeta,
    scale: float,
) -> torch.Tensor:
    """One chunk: q [n, H, D] attends causally to positions 0 .. start_pos + i."""
    qt = q.transpose(0, 1).unsqueeze(0)
    gqa = k_cache.shape[2] != q.shape[1]
    if c.start_pos == 0:  # fresh prompt: causal attention over its own new k/v
        k, v = k_new.transpose(0, 1).unsqueeze(0), v_new.transpose(0, 1).unsqueeze(0)
        out = F.scaled_dot_product_attention(qt, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    else:  # later chunk: its whole context, gathered once for all its queries
        k = _gather(k_cache, c.block_ids, c.ctx_len)
        v = _gather(v_cache, c.block_ids, c.ctx_len)
        n = q.shape[0]
        qpos = torch.arange(c.start_pos, c.ctx_len, device=q.device).unsqueeze(1)
        allowed = torch.arange(c.ctx_len, device=q.device).unsqueeze(0) <= qpos
        out = F.scaled_dot_product_attention(
            qt, k.to(q.dtype), v.to(q.dtype), attn_mask=allowed.view(1, 1, n, -1), scale=scale,
            enable_gqa=gqa,
        )  # fmt: skip
    return out.squeeze(0).transpose(0, 1)


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:  # fmt: skip
    """Store the step's new k/v [T, kvH, D] into their cache slots."""
    kvh, d, dtype = k_cache.shape[2], k_cache.shape[3], k_cache.dtype
    k_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, k if k.dtype == dtype else k.to(dtype))
    v_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, v if v.dtype == dtype else v.to(dtype))


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Write k/v [T, kvH, D] into the cache, attend with q [T, H, D]; returns [T, H, D].
    Run eagerly, it is a `paged_attention` range in torch.profiler traces."""
    if torch.compiler.is_compiling() or not torch.autograd.profiler._is_profiler_enabled:
        return _attend(q, k, v, k_cache, v_cache, meta, scale)  # (no range to record)
    with torch.profiler.record_function("paged_attention"):
        return _attend(q, k, v, k_cache, v_cache, meta, scale)


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
    if not meta.prefills:  # decodes only: no Python int of the batch size is consulted
        return _decode(q, k_cache, v_cache, meta, scale)
    parts: list[torch.Tensor] = []
    nd = meta.num_decode
    if nd:
        parts.append(_decode(q[:nd], k_cache, v_cache, meta, scale))
    for c in meta.prefills:
        s, e = c.tok_start, c.tok_end
        parts.append(_prefill(q[s:e], k[s:e], v[s:e], k_cache, v_cache, c, scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
