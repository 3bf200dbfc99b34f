"""`QTensor`: a weight-only quantized weight [N, K] (int4, int8 or dense), the form every
GGUF type is read into (`gguf_quant.py`) and the kernels pack from (`quant.py`,
`native/qmatrix.py`); its own module so that both import it without a cycle."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

INT4_OFFSET = 8  # int4 values q in 0..15 stand for q - 8


@dataclass(frozen=True)
class QTensor:
    """A quantized weight [N, K] (see the module doc). bits: 4, 8 or 16 (dense)."""

    q: torch.Tensor  # uint8 [N, K] (int4 values), int8 [N, K], or float32 [N, K] (dense)
    scale: torch.Tensor | None  # float32 [N, K // group]
    zero: torch.Tensor | None  # float32 [N, K // group] (int4; optional for int8)
    group: int
    bits: int

    def __post_init__(self) -> None:
        if self.bits not in (4, 8, 16):
            raise ValueError(f"bits must be 4, 8 or 16, got {self.bits}")
        if self.q.dim() != 2:
            raise ValueError(f"q must be 2-D [N, K], got shape {tuple(self.q.shape)}")
        if self.bits != 16 and (self.group <= 0 or self.q.shape[1] % self.group):
            raise ValueError(f"group must divide K = {self.q.shape[1]}, got {self.group}")

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.q.shape[0]), int(self.q.shape[1])

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [N, K] this stands for."""
        if self.bits == 16:
            return self.q.float()
        assert self.scale is not None
        scale = self.scale.repeat_interleave(self.group, dim=1)
        offset = INT4_OFFSET if self.bits == 4 else 0
        w = (self.q.float() - offset) * scale
        if self.zero is None:
            return w
        return w + self.zero.repeat_interleave(self.group, dim=1)

    def rows(self, index: np.ndarray) -> QTensor:
        """The rows `index` (a permutation of output channels), in that order."""
        idx = torch.from_numpy(np.ascontiguousarray(index))

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[idx]

        return replace(self, q=self.q[idx], scale=pick(self.scale), zero=pick(self.zero))
