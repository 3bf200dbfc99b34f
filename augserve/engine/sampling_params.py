"""Per-request sampling parameters and the stop-string helper."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each token of one request.

    temperature == 0 means greedy (argmax). top_k <= 0 (or -1) disables top-k,
    top_p == 1.0 disables nucleus filtering. With `seed` set, sampling is
    reproducible: the random draw for a token depends only on (seed, position).
    `stop` strings are matched by the engine loop on detokenized text
    (see `check_stop`); `stop_token_ids` and EOS (unless `ignore_eos`) end the
    request when sampled. `n` samples per prompt (the offline `LLM` fans them
    out as `n` requests; sample i draws with `seed + i` when a seed is set).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an int >= 1, got {self.n}")
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or (self.top_k < 1 and self.top_k not in (0, -1)):
            raise ValueError(f"top_k must be -1/0 (disabled) or >= 1, got {self.top_k}")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {self.seed}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be non-negative ints, got {self.stop_token_ids}")

    def sample(self, i: int) -> SamplingParams:
        """The params of sample `i` of `n`: one sample, its own seed."""
        seed = None if self.seed is None else self.seed + i
        return replace(self, n=1, seed=seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


def check_stop(text: str, stop: tuple[str, ...] | list[str], start: int = 0) -> int | None:
    """Index at which to truncate `text` if it contains a stop string, else None.

    The earliest match wins; the stop string itself is excluded from the output.
    `start` lets the caller search only newly added text (pass
    `len(old_text) - max(len(s) for s in stop) + 1`, clipped at 0).
    """
    best: int | None = None
    for s in stop:
        idx = text.find(s, max(start, 0))
        if idx != -1 and (best is None or idx < best):
            best = idx
    return best
