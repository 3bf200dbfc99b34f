"""Model families by Hugging Face architecture name."""

from __future__ import annotations

from typing import Any

from augserve.engine.models.base import CausalLM
from augserve.engine.models.gptj import GPTJForCausalLM
from augserve.engine.models.llama import LlamaForCausalLM
from augserve.engine.models.opt import OPTForCausalLM

MODEL_REGISTRY: dict[str, type[CausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "OPTForCausalLM": OPTForCausalLM,
    "GPTJForCausalLM": GPTJForCausalLM,
}


def model_class(hf_config: dict[str, Any], where: str = "config.json") -> type[CausalLM]:
    """The model class for a config's `architectures`; ValueError naming the file if unknown."""
    archs = hf_config.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise ValueError(f"{where}: field 'architectures' must be a non-empty list")
    for a in archs:
        if a in MODEL_REGISTRY:
            return MODEL_REGISTRY[a]
    raise ValueError(
        f"{where}: unsupported architectures {archs}; supported: {sorted(MODEL_REGISTRY)}"
    )


__all__ = ["MODEL_REGISTRY", "CausalLM", "model_class"]
