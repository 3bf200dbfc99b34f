"""GGUF tensor type ids and block sizes used by the quantized path (the `gguf` package's
GGMLQuantizationType values; docs/models.md, "GGUF weights kept quantized")."""

from __future__ import annotations

F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, BF16 = 0, 1, 2, 3, 8, 12, 30
BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q4_K: 144, Q8_0: 34}
BLOCK_ELEMS = {Q4_0: 32, Q4_1: 32, Q4_K: 256, Q8_0: 32}
GROUP = 32  # values per scale in Q4_0, Q4_1, Q8_0 and Q4_K's sub-blocks
