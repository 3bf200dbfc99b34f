"""Log-probabilities in OpenAI's response shapes.

Each generated token's entry comes from the engine (`engine.sampler.Logprob`): the
sampled token's log-probability under the model's raw logits (vLLM's default) and
the `k` most likely tokens. Chat: `{"content": [{"token", "logprob", "bytes",
"top_logprobs": [...]}], "refusal": null}`; completions: `{"tokens",
"token_logprobs", "top_logprobs", "text_offset"}`. One entry per generated token
(a stop token included, as vLLM does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from augserve.engine.sampler import Logprob


def _text(tokenizer: Any, token_id: int) -> str:
    return str(tokenizer.decode([token_id], skip_special_tokens=False))


def _entry(tokenizer: Any, token_id: int, logprob: float) -> dict[str, Any]:
    text = _text(tokenizer, token_id)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(tokenizer: Any, entries: Sequence[Logprob]) -> dict[str, Any]:
    content = []
    for lp in entries:
        item = _entry(tokenizer, lp.token_id, lp.logprob)
        item["top_logprobs"] = [_entry(tokenizer, t, v) for t, v in lp.top]
        content.append(item)
    return {"content": content, "refusal": None}


def completion_logprobs(
    tokenizer: Any, entries: Sequence[Logprob], offset: int = 0
) -> dict[str, Any]:
    tokens, token_logprobs, top, offsets = [], [], [], []
    for lp in entries:
        text = _text(tokenizer, lp.token_id)
        tokens.append(text)
        token_logprobs.append(lp.logprob)
        top.append({_text(tokenizer, t): v for t, v in lp.top})
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }
