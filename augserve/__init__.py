"""augserve: serving tool-augmented LLM inference with the AugServe scheduler."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The offline API needs torch; import it only when asked for.
    if name in ("LLM", "SamplingParams"):
        import importlib

        return getattr(importlib.import_module("augserve.engine.llm"), name)
    raise AttributeError(name)
