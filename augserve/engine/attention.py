"""Paged attention over a block-table KV cache, for mixed prefill/decode batches.

A step's tokens are flattened: first the decode tokens (one per sequence,
batched together), then each prefill chunk's tokens. Every layer writes the
new K/V into the slots of each sequence's block table, then attends over the
sequence's whole context gathered from the cache. The metadata (index
tensors, masks) is built once per step by `build_metadata` and shared by all
layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:  # optional fused paged-attention kernel (CUDA only)
    from flash_attn import flash_attn_with_kvcache as _flash_kvcache
except Exception:  # noqa: BLE001 - any import failure means "not available"
    _flash_kvcache = None

# Above this many score elements (B * H * n * C) use SDPA to bound fp32 score memory.
_MANUAL_MAX_SCORES = 64 * 1024 * 1024


@dataclass
class PrefillChunkMeta:
    """One prefill chunk: tokens [tok_start, tok_end) of the flat batch."""

    tok_start: int
    tok_end: int
    start_pos: int
    block_ids: torch.Tensor  # [ceil(ctx_len / block_size)] long
    ctx_len: int
    mask: torch.Tensor  # [n, ctx_len] fp32 additive bias (0 / -inf), causal from start_pos


@dataclass
class AttentionMetadata:
    """Per-step index tensors shared by all layers."""

    slot_mapping: torch.Tensor  # [T] long, flat cache slot of each new token
    num_decode: int  # first num_decode tokens are single-token decodes
    decode_block_tables: torch.Tensor | None  # [Bd, max_blocks] long, padded with 0
    decode_mask: torch.Tensor | None  # [Bd, 1, max_blocks * block_size] fp32 bias (0 / -inf)
    prefills: list[PrefillChunkMeta]
    block_size: int
    decode_ctx_lens: torch.Tensor | None = None  # [Bd] int32, for the fused CUDA kernel


def _bias(allowed: torch.Tensor) -> torch.Tensor:
    """Bool mask (True = attend) -> fp32 additive bias (0 / -inf)."""
    return torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def build_metadata(
    decode: list[tuple[int, list[int]]],
    prefill: list[tuple[int, int, list[int]]],
    block_size: int,
    device: torch.device,
) -> AttentionMetadata:
    """Build step metadata.

    decode: (position, block_table) per single-token sequence.
    prefill: (start_pos, num_tokens, block_table) per chunk, in flat order after decodes.
    """
    slot_parts: list[torch.Tensor] = []
    bd = len(decode)
    dec_tables = dec_mask = ctx_t = None
    if bd:
        ctx = [pos + 1 for pos, _ in decode]
        max_blocks = (max(ctx) + block_size - 1) // block_size
        rows = [bt[:max_blocks] + [0] * (max_blocks - len(bt[:max_blocks])) for _, bt in decode]
        dec_tables = torch.tensor(rows, dtype=torch.long, device=device)
        ctx_t = torch.tensor(ctx, device=device)
        ar = torch.arange(max_blocks * block_size, device=device)
        dec_mask = _bias(ar.unsqueeze(0) < ctx_t.unsqueeze(1)).view(bd, 1, -1)
        slots = [bt[pos // block_size] * block_size + pos % block_size for pos, bt in decode]
        slot_parts.append(torch.tensor(slots, dtype=torch.long, device=device))
    metas: list[PrefillChunkMeta] = []
    tok = bd
    for start, n, bt in prefill:
        ctx_len = start + n
        nblk = (ctx_len + block_size - 1) // block_size
        if nblk > len(bt):
            raise ValueError(f"block table of {len(bt)} blocks too short for {ctx_len} tokens")
        qpos = torch.arange(start, ctx_len, device=device).unsqueeze(1)
        mask = _bias(torch.arange(ctx_len, device=device).unsqueeze(0) <= qpos)
        block_ids = torch.tensor(bt[:nblk], dtype=torch.long, device=device)
        metas.append(PrefillChunkMeta(tok, tok + n, start, block_ids, ctx_len, mask))
        new_pos = torch.arange(start, ctx_len, device=device)
        slot_parts.append(block_ids[new_pos // block_size] * block_size + new_pos % block_size)
        tok += n
    slot_t = torch.cat(slot_parts) if len(slot_parts) > 1 else slot_parts[0]
    lens = ctx_t.to(torch.int32) if bd else None
    return AttentionMetadata(slot_t, bd, dec_tables, dec_mask, metas, block_size, lens)


def _gather(cache: torch.Tensor, block_ids: torch.Tensor, ctx_len: int) -> torch.Tensor:
    """[num_blocks, bs, kvH, D] + block ids -> [1, kvH, ctx_len, D]."""
    g = cache.index_select(0, block_ids).flatten(0, 1)[:ctx_len]
    return g.transpose(0, 1).unsqueeze(0)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [B, H, n, D], k/v [B, kvH, C, D], mask: fp32 additive bias broadcastable to [B, n, C].

    On CPU an explicit grouped matmul + fp32 softmax is several times faster than
    scaled_dot_product_attention for these shapes (decode gemv, short chunks);
    on other devices, or for very large score matrices, SDPA is used.
    """
    b, h, n, d = q.shape
    kvh, c = k.shape[1], k.shape[2]
    if q.device.type != "cpu" or b * h * n * c > _MANUAL_MAX_SCORES:
        m = (mask.unsqueeze(1) if mask.dim() == 3 else mask).to(q.dtype)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, scale=scale, enable_gqa=kvh != h
        )
    g = h // kvh
    scores = torch.matmul(q.reshape(b, kvh, g * n, d), k.transpose(-1, -2))
    # one fused op: fp32 result = bias + scale * scores (type promotion does the upcast)
    scores = torch.add(mask.view(-1, 1, 1, n, c), scores.view(b, kvh, g, n, c), alpha=scale)
    probs = scores.softmax(dim=-1).to(v.dtype).view(b, kvh, g * n, c)
    return torch.matmul(probs, v).view(b, h, n, d)


def _use_flash(q: torch.Tensor, block_size: int) -> bool:
    """flash-attn's paged kernel needs CUDA, fp16/bf16 and blocks of a multiple of 256."""
    return (
        _flash_kvcache is not None
        and q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and block_size % 256 == 0
    )


def _decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q [Bd, H, D] -> [Bd, H, D], all decodes in one padded, masked call."""
    assert meta.decode_block_tables is not None and meta.decode_mask is not None
    if _use_flash(q, meta.block_size):  # UNTESTED here (no GPU): paged kernel, no gather
        assert _flash_kvcache is not None
        out = _flash_kvcache(
            q.unsqueeze(1),
            k_cache,
            v_cache,
            cache_seqlens=meta.decode_ctx_lens,
            block_table=meta.decode_block_tables.to(torch.int32),
            softmax_scale=scale,
            causal=True,
        )
        return out.squeeze(1)
    bd, max_blocks = meta.decode_block_tables.shape
    kvh, d = k_cache.shape[2], k_cache.shape[3]
    flat = meta.decode_block_tables.view(-1)
    c = max_blocks * meta.block_size
    k = k_cache.index_select(0, flat).view(bd, c, kvh, d).transpose(1, 2)
    v = v_cache.index_select(0, flat).view(bd, c, kvh, d).transpose(1, 2)
    return _attend(q.unsqueeze(2), k, v, meta.decode_mask, scale).squeeze(2)


def _prefill_attention(
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
    if c.start_pos == 0:  # fresh prompt: plain causal attention over the new k/v (one fused op)
        k, v = k_new.transpose(0, 1).unsqueeze(0), v_new.transpose(0, 1).unsqueeze(0)
        out = F.scaled_dot_product_attention(
            qt, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
        )
    else:
        k = _gather(k_cache, c.block_ids, c.ctx_len)
        v = _gather(v_cache, c.block_ids, c.ctx_len)
        out = _attend(qt, k, v, c.mask.unsqueeze(0), scale)
    return out.squeeze(0).transpose(0, 1)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Write k/v [T, kvH, D] into the cache, attend with q [T, H, D]; returns [T, H, D]."""
    kvh, d = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, kvh, d).index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, kvh, d).index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
    parts: list[torch.Tensor] = []
    nd = meta.num_decode
    if nd:
        parts.append(_decode_attention(q[:nd], k_cache, v_cache, meta, scale))
    for c in meta.prefills:
        s, e = c.tok_start, c.tok_end
        parts.append(_prefill_attention(q[s:e], k[s:e], v[s:e], k_cache, v_cache, c, scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
