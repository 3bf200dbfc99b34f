"""Per-request sampling parameters and the stop-string helper."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

GrammarKind = Literal["json_object", "json_schema", "structural_tag", "regex"]


@dataclass(frozen=True)
class GrammarSpec:
    """What a constrained request must produce: `kind` and its `source` (a JSON schema
    as a JSON string, a structural tag as a JSON string, or a regex). Hashable, so
    compiled grammars are cached per (tokenizer, spec); see `engine/grammar.py`.
    `compiled`: the compiled grammar, where it was compiled ahead (the server's
    preparation), so the engine needs no cache lookup; not part of equality."""

    kind: GrammarKind
    source: str = ""
    compiled: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("json_object", "json_schema", "structural_tag", "regex"):
            raise ValueError(f"grammar kind must be json_object/json_schema/..., got {self.kind!r}")


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

    Logits processors (all batched; a batch without any costs nothing extra):
    `logit_bias` {token id: bias} is added to the logits; `min_tokens` masks EOS and
    the stop tokens (and stop strings are not checked) until that many tokens were
    generated; `repetition_penalty` (HF / CTRL) divides positive and multiplies
    negative logits of every token in the context (prompt and output);
    `presence_penalty` / `frequency_penalty` (OpenAI) subtract
    `presence * (count > 0) + frequency * count` over the generated tokens; `min_p`
    drops tokens whose probability is below `min_p` times the top one (after the
    temperature). `logprobs` = k returns each sampled token's log-probability and the
    k most likely (from the model's raw logits, as vLLM's default). `grammar`
    constrains the output (xgrammar; `engine/grammar.py`).
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
    min_tokens: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_p: float = 0.0
    logprobs: int | None = None
    grammar: GrammarSpec | None = None

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
        self._check_processors()

    def _check_processors(self) -> None:
        if not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise ValueError(f"min_tokens must be an int >= 0, got {self.min_tokens}")
        if self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"
            )
        bias = self.logit_bias
        items = bias.items() if isinstance(bias, Mapping) else bias
        pairs = tuple((int(t), float(b)) for t, b in items)
        if any(t < 0 for t, _ in pairs):
            raise ValueError(f"logit_bias token ids must be >= 0, got {sorted(dict(pairs))}")
        object.__setattr__(self, "logit_bias", tuple(sorted(pairs)))
        if not self.repetition_penalty > 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or self.logprobs < 0):
            raise ValueError(f"logprobs must be an int >= 0 or None, got {self.logprobs}")

    def sample(self, i: int) -> SamplingParams:
        """The params of sample `i` of `n`: one sample, its own seed."""
        seed = None if self.seed is None else self.seed + i
        return replace(self, n=1, seed=seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        """Any processor that reads the request's tokens (or adds a bias) is set."""
        return bool(
            self.logit_bias
            or self.repetition_penalty != 1.0
            or self.presence_penalty
            or self.frequency_penalty
        )


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
