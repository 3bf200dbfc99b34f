"""GGUF embedding tables kept as the file's bytes (docs/models.md, "GGUF weights kept
quantized"): `QuantEmbedding` dequantizes only the rows a step looks up, exactly (the
values of the `gguf` package's dequantization). Q8_0, Q4_0 and Q4_1 rows are decoded in
torch (`dequantize_rows`: the package's numpy code costs ~1 ms for one row, a tenth of a
decode step of SmolLM2); other types through the package, in the custom op `gguf_rows`
(opaque to torch.compile, with a fake kernel for tracing).

A table tied to the LM head (one GGUF tensor for both) is held once: where the head's
native form holds the same bytes (Q4_0, Q8_0: offsets implied, scales the file's float16),
`share` drops the table and rows are read from the head (`native.qmatrix.rows`, the same
values), ~76 MB less for a 0.5B Qwen2 with a Q4_0 table.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from augserve.engine.gguf_types import BLOCK_BYTES, Q4_0, Q4_1, Q8_0
from augserve.engine.native import qmatrix as nq


def _f16_t(b: torch.Tensor) -> torch.Tensor:
    """[..., 2] uint8 -> [..., 1] float32 (the fp16 the bytes hold)."""
    return b.contiguous().view(torch.float16).float()


def _nibbles_t(qs: torch.Tensor) -> torch.Tensor:
    return torch.cat([qs & 0x0F, qs >> 4], dim=-1).float()


def dequantize_rows(rows: torch.Tensor, qtype: int) -> torch.Tensor | None:
    """Rows [T, row_bytes] of a Q8_0 / Q4_0 / Q4_1 tensor as float32 [T, K], the values
    the `gguf` package's dequantization gives; None for other types."""
    if qtype not in (Q8_0, Q4_0, Q4_1):
        return None
    t = rows.shape[0]
    b = rows.view(t, -1, BLOCK_BYTES[qtype])
    d = _f16_t(b[..., :2])
    if qtype == Q8_0:
        w = b[..., 2:].contiguous().view(torch.int8).float() * d
    elif qtype == Q4_0:
        w = (_nibbles_t(b[..., 2:]) - 8) * d
    else:
        w = _nibbles_t(b[..., 4:]) * d + _f16_t(b[..., 2:4])
    return w.view(t, -1)


@torch.library.custom_op("augserve::gguf_rows", mutates_args=())
def gguf_rows(raw: torch.Tensor, ids: torch.Tensor, qtype: int, dim: int) -> torch.Tensor:
    """Rows `ids` of a GGUF tensor kept as its bytes `raw` [V, row_bytes], float32 [T, dim]."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    picked = raw[ids.reshape(-1).cpu()].numpy()
    rows = dequantize(picked, GGMLQuantizationType(qtype)).reshape(-1, dim)
    return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).to(raw.device)


@gguf_rows.register_fake
def _(raw: torch.Tensor, ids: torch.Tensor, qtype: int, dim: int) -> torch.Tensor:
    return raw.new_empty((ids.numel(), dim), dtype=torch.float32)


class QuantEmbedding(nn.Module):
    """An embedding table kept as a GGUF tensor's bytes; looks rows up exactly."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.dtype = num_embeddings, embedding_dim, dtype
        self.raw: torch.Tensor | None  # uint8 [V, row_bytes]
        self.register_buffer("raw", None, persistent=False)
        self.qtype = -1
        self.shared: nq.NativeMatrix | None = None  # the tied LM head's weight, if shared

    @property
    def loaded(self) -> bool:
        return self.raw is not None or self.shared is not None

    def set_raw(self, raw: np.ndarray, qtype: int) -> None:
        rows = raw.reshape(self.num_embeddings, -1)
        self.raw, self.qtype = torch.from_numpy(np.array(rows, dtype=np.uint8)), int(qtype)
        self.shared = None

    def share(self, head: nq.NativeMatrix | None) -> bool:
        """Read rows from the tied LM head's native weight and drop the table, if the head
        holds the same values: a Q4_0 / Q8_0 table, its rows compared exactly on a sample
        (the first, last and every 97th). False (nothing changed) otherwise."""
        if self.raw is None or head is None or self.qtype not in (Q4_0, Q8_0):
            return False
        if (head.n, head.k) != (self.num_embeddings, self.embedding_dim):
            return False
        if head.kind != (8 if self.qtype == Q8_0 else 4):
            return False
        ids = torch.cat([torch.arange(0, head.n, 97), torch.tensor([head.n - 1])])
        want = dequantize_rows(self.raw.index_select(0, ids), self.qtype)
        if want is None or not torch.equal(nq.rows(head, ids), want):
            return False
        self.shared, self.raw = head, None
        return True

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.shared is not None:
            found = nq.rows(self.shared, ids)
            return found.to(self.dtype).reshape(*ids.shape, self.embedding_dim)
        if self.raw is None:
            raise RuntimeError("QuantEmbedding used before set_raw")
        rows = dequantize_rows(self.raw.index_select(0, ids.reshape(-1)), self.qtype)
        if rows is None:
            rows = gguf_rows(self.raw, ids, self.qtype, self.embedding_dim)
        out: torch.Tensor = rows.to(self.dtype).reshape(*ids.shape, self.embedding_dim)
        return out

    def weight_bytes(self) -> int:
        return 0 if self.raw is None else self.raw.numel()
