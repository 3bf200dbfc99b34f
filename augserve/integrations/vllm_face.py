"""What our server reads off its engine, for `augserve serve --engine vllm` (no vLLM import).

The server's handlers read `state.engine.engine`: the tokenizer (chat prompts,
tool results, stop markers), the vocabulary size (token-id prompts, logit_bias),
the context length, the grammar compiler (response_format, forced tool calls),
the predictor (tool priors, /metrics) and where the latency model came from.
`VllmFace` is that surface for a vLLM engine: our own tokenizer over the model's
`tokenizer.json` (the same ids vLLM uses, so token ids pass through unchanged),
vLLM's context length and block count, no predictor on the server side (the
plugin's online predictor lives in vLLM's engine-core process), and a grammar
compiler that refuses: structured outputs are not mapped (docs/vllm-plugin.md).

`VllmStats` is what `/metrics` reads (`stats()`, augserve/server/metrics.py):
vLLM's own scheduler stats, received by the client process with each output
batch (a vLLM stat logger feeds `record`), and the adapter's count of requests
paused in a server-side call (docs/design.md, the paused state).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from augserve.engine.grammar import GrammarError
from augserve.engine.sampling_params import GrammarSpec
from augserve.engine.tokenizer import Tokenizer
from augserve.sched.output import SchedulerStats

IN_VLLM = "in_vllm"  # a call's pause inside a vLLM streaming session (held or released there)
RESUBMIT = "discard"  # a call that ended the vLLM request: its context is recomputed or cached


class NoGrammars:
    """The grammar compiler's surface (`server/preparation.py`) that compiles nothing:
    a constrained request is a 400 naming its field, before it reaches vLLM."""

    def __init__(self) -> None:
        self.cache: dict[GrammarSpec, Any] = {}

    def build(self, spec: GrammarSpec) -> Any:
        raise GrammarError(
            f"{spec.kind} grammars are not available with --engine vllm "
            "(docs/vllm-plugin.md: what cannot be mapped)"
        )


@dataclass
class Runner:
    vocab_size: int


@dataclass
class VllmStats:
    """The latest vLLM scheduler stats, accumulated prefix-cache counters, and the
    requests paused in calls (by where their context is: `IN_VLLM`, `RESUBMIT`)."""

    num_blocks: int
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    paused: dict[str, str] = field(default_factory=dict)  # request id -> IN_VLLM / RESUBMIT

    def record(self, sched: Any) -> None:
        """One vLLM `SchedulerStats` (its prefix-cache counters are per interval)."""
        self.num_running = int(sched.num_running_reqs)
        self.num_waiting = int(sched.num_waiting_reqs)
        self.kv_usage = float(sched.kv_cache_usage)
        pc = getattr(sched, "prefix_cache_stats", None)
        if pc is not None:
            self.prefix_queries += int(getattr(pc, "queries", 0))
            self.prefix_hits += int(getattr(pc, "hits", 0))

    def snapshot(self) -> SchedulerStats:
        paused: dict[str, int] = {}
        for where in self.paused.values():
            paused[where] = paused.get(where, 0) + 1
        return SchedulerStats(
            num_waiting=self.num_waiting,
            num_running=self.num_running,
            num_paused=paused,
            num_swapped=0,
            device_blocks_used=round(self.kv_usage * self.num_blocks),
            device_blocks_total=self.num_blocks,
            host_blocks_used=0,
            host_blocks_total=0,
            token_budget=0,  # the plugin's budget is set in vLLM's engine-core process
            prefix_cache_queries=self.prefix_queries,
            prefix_cache_hits=self.prefix_hits,
        )


class VllmFace:
    """`state.engine.engine` for a vLLM engine (the module doc)."""

    latency_source = "vllm"  # the plugin prices with its `profile` option
    predictor: Any = None

    def __init__(self, model_dir: str, max_model_len: int, vocab_size: int) -> None:
        self.tokenizer = Tokenizer(model_dir)
        self.max_model_len = max_model_len
        self.runner = Runner(vocab_size)
        self.grammars = NoGrammars()
        self.grammar_cache_bytes = 0

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return tuple(self.tokenizer.eos_token_ids)
