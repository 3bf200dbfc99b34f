"""Our sampling parameters as vLLM's, for one turn of a request served by
`augserve/integrations/vllm_engine.py` (what cannot be mapped: docs/vllm-plugin.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm import SamplingParams as VllmParams  # type: ignore[import-not-found,unused-ignore]
from vllm.sampling_params import RequestOutputKind  # type: ignore[import-not-found,unused-ignore]

from augserve.engine.sampling_params import SamplingParams


def unsupported(params: SamplingParams) -> str | None:
    """The first field this adapter cannot map to vLLM, or None (docs/vllm-plugin.md)."""
    if params.logprobs is not None:
        return "logprobs"
    if params.grammar is not None:
        return "response_format"
    return None


def vllm_params(params: SamplingParams, stop_ids: Sequence[int], max_tokens: int) -> Any:
    """vLLM's parameters for one turn of `params`: stop strings stay ours (vLLM's streaming
    input refuses them), our detokenizer reads the ids (vLLM's is off)."""
    return VllmParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else 0,
        min_p=params.min_p,
        seed=params.seed,
        max_tokens=max(1, max_tokens),
        min_tokens=min(params.min_tokens, max(1, max_tokens)),
        stop_token_ids=sorted(set(params.stop_token_ids) | set(stop_ids)),
        ignore_eos=params.ignore_eos,
        logit_bias=dict(params.logit_bias) or None,
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )
