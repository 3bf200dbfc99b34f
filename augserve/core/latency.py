"""Cost models: how long an iteration, a prefill or a swap takes, and KV size.

The scheduler asks a `LatencyModel` for every time it needs (docs/paper.md sections 2
to 4); the simulator uses the same model to advance its clock. A
`LatencyProfile` is the linear model both use:

    t = c0 + c_prefill * prefill_tokens + c_attn * prefill_attn
          + c_decode * decode_reqs + c_ctx * decode_context

It is plain data: shipped profiles are derived from public hardware facts with
a roofline model (`augserve/profiles/`), and `augserve profile` fits one to
the real engine.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one iteration computes.

    prefill_tokens: tokens computed by prefill-like chunks (prompt, recompute,
        returned tokens). prefill_attn: sum over those chunks of
        chunk_len * (tokens of context the chunk attends to), the quadratic
        attention work. decode_reqs / decode_context: requests decoding one
        token and the sum of their context lengths. swap_tokens: tokens moved
        between device and host this iteration.
    """

    prefill_tokens: int = 0
    prefill_attn: int = 0
    decode_reqs: int = 0
    decode_context: int = 0
    swap_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return self.prefill_tokens == 0 and self.decode_reqs == 0


class LatencyModel(Protocol):
    """The times and sizes the scheduler needs. Seconds and tokens."""

    @property
    def kv_bytes_per_token(self) -> int: ...

    def iteration_time(self, shape: BatchShape) -> float: ...

    def prefill_time(self, num_tokens: int) -> float:
        """tau_fwd(L): an iteration that prefills L tokens from scratch."""
        ...

    def decode_iter_time(self) -> float:
        """tau_iter: one decode iteration at batch 1."""
        ...

    def swap_time(self, num_tokens: int) -> float:
        """tau_swap(L): move L tokens' KV across the host link, one way."""
        ...

    def swap_tokens_per_iter(self) -> int:
        """N_fwd_max: tokens that can be swapped during one iteration without stalling."""
        ...


def _check_nonneg(obj: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be >= 0, got {value}")


def _check_finite(obj: object, names: tuple[str, ...]) -> None:
    """A NaN passes every comparison (`nan < 0` is False): check numbers are numbers."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{type(obj).__name__}.{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{type(obj).__name__}.{name} must be finite, got {value}")


_NUMBERS = (
    "c0", "c_prefill", "c_attn", "c_decode", "c_ctx", "kv_bytes", "device_kv_bytes",
    "host_kv_bytes", "swap_bandwidth", "max_batch_tokens", "max_num_seqs",
)  # fmt: skip


@dataclass(frozen=True)
class LatencyProfile:
    """A linear iteration-time model plus the memory facts of one setup."""

    name: str
    c0: float  # seconds per iteration regardless of batch (weights read, launches)
    c_prefill: float  # seconds per prefill token
    c_attn: float  # seconds per (prefill token x attended context token)
    c_decode: float  # seconds per decoding request
    c_ctx: float  # seconds per context token read by decode attention
    kv_bytes: int  # KV bytes per token (all layers, K and V)
    device_kv_bytes: int  # device memory for the KV cache
    host_kv_bytes: int  # host memory for swapped KV
    swap_bandwidth: float  # bytes per second over the host link, each way
    max_batch_tokens: int  # T_max, the static token budget
    max_num_seqs: int = 256
    description: str = ""

    def __post_init__(self) -> None:
        _check_finite(self, _NUMBERS)
        _check_nonneg(self, ("c0", "c_prefill", "c_attn", "c_decode", "c_ctx", "host_kv_bytes"))
        for name in ("kv_bytes", "device_kv_bytes", "max_batch_tokens", "max_num_seqs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"LatencyProfile.{name} must be > 0, got {getattr(self, name)}")
        if self.swap_bandwidth <= 0:
            raise ValueError(
                f"LatencyProfile.swap_bandwidth must be > 0, got {self.swap_bandwidth}"
            )

    # --- LatencyModel -----------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv_bytes

    def iteration_time(self, shape: BatchShape) -> float:
        if shape.is_empty:
            return 0.0
        return (
            self.c0
            + self.c_prefill * shape.prefill_tokens
            + self.c_attn * shape.prefill_attn
            + self.c_decode * shape.decode_reqs
            + self.c_ctx * shape.decode_context
        )

    def step_time(self, shape: BatchShape) -> float:
        """An iteration with its swap traffic: the host link overlaps the compute, so
        only swap time beyond the compute stalls the iteration."""
        compute = self.iteration_time(shape)
        if not shape.swap_tokens:
            return compute
        return compute + max(0.0, self.swap_time(shape.swap_tokens) - compute)

    def prefill_time(self, num_tokens: int) -> float:
        if num_tokens <= 0:
            return 0.0
        return self.iteration_time(
            BatchShape(prefill_tokens=num_tokens, prefill_attn=num_tokens * (num_tokens + 1) // 2)
        )

    def decode_iter_time(self) -> float:
        return self.iteration_time(BatchShape(decode_reqs=1, decode_context=1))

    def swap_time(self, num_tokens: int) -> float:
        return num_tokens * self.kv_bytes / self.swap_bandwidth

    def swap_tokens_per_iter(self) -> int:
        return max(1, int(self.swap_bandwidth * self.decode_iter_time() / self.kv_bytes))

    def scaled(self, pace: float) -> LatencyProfile:
        """The profile of an engine `pace` times slower at every batch (the forward's
        coefficients; the memory facts and the host link unchanged; `core/pace.py`)."""
        if not (math.isfinite(pace) and pace > 0):
            raise ValueError(f"pace must be a finite number > 0, got {pace}")
        return replace(
            self, c0=self.c0 * pace, c_prefill=self.c_prefill * pace,
            c_attn=self.c_attn * pace, c_decode=self.c_decode * pace, c_ctx=self.c_ctx * pace,
        )  # fmt: skip

    # --- capacity --------------------------------------------------------------
    def device_blocks(self, block_size: int) -> int:
        return self.device_kv_bytes // (self.kv_bytes * block_size)

    def host_blocks(self, block_size: int) -> int:
        return self.host_kv_bytes // (self.kv_bytes * block_size)

    # --- (de)serialization: plain dicts; files are read by the layers above ----
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> LatencyProfile:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown LatencyProfile field(s) {unknown}")
        missing = sorted(
            f.name for f in fields(cls) if f.name not in data and f.name not in _DEFAULTED
        )
        if missing:
            raise ValueError(f"{source}: missing LatencyProfile field(s) {missing}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from exc


_DEFAULTED = {"max_num_seqs", "description"}
