"""Build a model from a Hugging Face (or GGUF) model dir: construct on the meta device,
materialize on the target device, load every weight and check none was missed.

Used by `model_runner.ModelRunner`; see docs/design.md for the engine's layers.
"""

from __future__ import annotations

from pathlib import Path

import torch

from augserve.engine.loader import load_config, open_weights
from augserve.engine.models import CausalLM, model_class
from augserve.engine.native_memory import malloc_trim
from augserve.engine.quant import check_loaded


def build_model(
    model_dir: str, dtype: torch.dtype, device: torch.device, quantize: bool = False
) -> CausalLM:
    """The model of `model_dir` built on `device` in `dtype` (kept quantized with
    `quantize`), every parameter loaded; ValueError naming one that was not."""
    hf = load_config(model_dir)
    cls = model_class(hf, str(Path(model_dir) / "config.json"))
    with torch.device("meta"):
        model = cls(hf).to(dtype)
        if quantize:
            model.quantize(dtype)
    # `to_empty` would call torch.empty_like on each meta tensor, which runs torch's Python
    # references and imports sympy (~35 MB resident); torch.empty of the shape does not
    empty = lambda t: torch.empty(t.shape, dtype=t.dtype, device=device)  # noqa: E731
    model._apply(empty)  # type: ignore[no-untyped-call]  # in place, as to_empty does
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))  # so a parameter the loader missed is caught below
    src = open_weights(model_dir)
    try:
        model.load_weights(src)
    finally:
        src.close()
    for name, p in model.named_parameters():
        if bool(torch.isnan(p).any()):
            raise ValueError(f"{model_dir}: parameter {name} was not loaded (or holds NaN)")
    check_loaded(model, model_dir)
    malloc_trim()  # the loader's freed temporaries (~60 MB for quantized SmolLM2) to the OS
    return model.eval()
