"""A vLLM logits processor that forces scripted tokens (random weights never call a tool).

Loaded in vLLM's engine-core process by `--vllm-args '{"logits_processors":
["vllm_script_lp:ScriptLP"]}'` (this directory on PYTHONPATH). `$AUGSERVE_VLLM_SCRIPTS`
names a JSON file {"SEED": [[turn 0 ids], [turn 1 ids], ...]}: a request with that
seed samples turn k's ids in order, then EOS (id 1). A request's turn is the number
of times it came back with a longer prompt: a streaming session's next input, or a
resubmission with the whole context (the prompt grows by the call's result either
way; a preempted request comes back with the same prompt and stays in its turn).
The same role as tests/server/conftest.py's ScriptedSampler for our own engine.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from vllm.v1.sample.logits_processor import LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

EOS = 1


class ScriptLP(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        with open(os.environ["AUGSERVE_VLLM_SCRIPTS"]) as f:
            self.scripts = {int(k): v for k, v in json.load(f).items()}
        # seed -> (turn, its prompt length, its output length when the turn began)
        self.turns: dict[int, tuple[int, int, int]] = {}
        self.rows: dict[int, tuple[list[int], list[int], int]] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def _new(self, params: Any, prompt: list[int] | None, output: list[int]) -> Any:
        seed = getattr(params, "seed", None)
        if seed not in self.scripts:
            return None
        turn, seen, base = self.turns.get(seed, (-1, -1, 0))
        n = len(prompt or [])
        if n > seen:
            turn, seen, base = turn + 1, n, len(output)
        self.turns[seed] = (turn, seen, base)
        script = self.scripts[seed]
        return (script[turn] if turn < len(script) else [], output, base)

    def update_state(self, batch_update: Any) -> None:
        process_dict_updates(self.rows, batch_update, self._new)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, (ids, output, base) in self.rows.items():
            pos = len(output) - base
            tok = ids[pos] if pos < len(ids) else EOS
            logits[row] = float("-inf")
            logits[row, tok] = 0.0
        return logits
