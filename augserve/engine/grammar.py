"""Grammar-constrained decoding with xgrammar: compile once, mask every step.

`GrammarMasker` belongs to one engine (one tokenizer, one vocabulary). It compiles a
`GrammarSpec` once (`GrammarCache`, an LRU bounded by the compiled grammars' bytes:
a schema seen again costs a lookup; xgrammar's own unbounded cache is off), makes a
fresh `GrammarMatcher` per request (from the compiled grammar the spec carries when
the server compiled it ahead, so the engine never compiles a server request's), and
each step fills the token bitmask of the constrained rows only (several rows at once
through `BatchGrammarMatcher`'s threads) and applies it to those rows of the logits:
on CPU with xgrammar's C++ kernel, on CUDA with its Triton kernel (or its torch path
without Triton). A request's matcher advances with each token it samples (`accept`).
JSON is generated compact (no free whitespace), so a model cannot wander in it.

Forced tool calls (`tool_choice` "required" or a named function) are a grammar too:
`call_grammar` wraps each tool's JSON schema in the call markup of the template
family's parser (Hermes `<tool_call>...</tool_call>`, Llama 3 JSON, Mistral
`[TOOL_CALLS]`), one of the tools for "required".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import torch

from augserve.engine.grammar_cache import DEFAULT_BYTES, GrammarCache, grammar_bytes
from augserve.engine.sampling_params import GrammarSpec

log = logging.getLogger("augserve.engine")

# (begin, end) around the call object {"name": ..., "arguments": ...} per parser
CALL_MARKUP = {
    "hermes": ("<tool_call>\n", "\n</tool_call>"),
    "llama3_json": ("", ""),
    "mistral": ("[TOOL_CALLS][", "]"),
}
ARGUMENTS_KEY = {"hermes": "arguments", "llama3_json": "parameters", "mistral": "arguments"}


class GrammarError(ValueError):
    """A grammar the library cannot compile (the message says why)."""


def call_grammar(parser: str, tools: Sequence[tuple[str, dict[str, Any] | None]]) -> GrammarSpec:
    """One call to one of `tools` ((name, JSON schema of its arguments)), in `parser`'s
    markup, as a structural-tag grammar."""
    begin, end = CALL_MARKUP[parser]
    key = ARGUMENTS_KEY[parser]
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, key: schema or {"type": "object"}},
            "required": ["name", key],
        }
        for name, schema in tools
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return GrammarSpec("structural_tag", json.dumps({"begin": begin, "schema": schema, "end": end}))


def _triton_ok() -> bool:
    try:
        import triton  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


class GrammarMasker:
    """Compiles grammars for one tokenizer and applies their masks to logits rows."""

    def __init__(
        self,
        backend_tokenizer: Any,
        vocab_size: int,
        stop_ids: Sequence[int],
        cache_bytes: int = DEFAULT_BYTES,
    ) -> None:
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        self._xgr = xgr
        hf = PreTrainedTokenizerFast(tokenizer_object=backend_tokenizer)  # type: ignore[no-untyped-call,unused-ignore]
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(
            hf, vocab_size=vocab_size, stop_token_ids=list(stop_ids) or None
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
        self.cache: GrammarCache[GrammarSpec] = GrammarCache(cache_bytes)
        self._batch = xgr.BatchGrammarMatcher(max_threads=2)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._backend: str | None = None

    # --- compile ------------------------------------------------------------------------
    def compile(self, spec: GrammarSpec) -> Any:
        """The compiled grammar of `spec` (cached); GrammarError when it cannot compile."""
        if spec.compiled is not None:
            return spec.compiled
        hit = self.cache.get(spec)
        if hit is not None:
            return hit
        compiled = self.build(spec)
        self.store(spec, compiled)
        return compiled

    def build(self, spec: GrammarSpec) -> Any:
        """Compile `spec` now, without the cache; GrammarError when it cannot compile."""
        try:
            return self._compile(spec)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise GrammarError(_first_line(exc)) from None

    def store(self, spec: GrammarSpec, compiled: Any) -> None:
        self.cache.put(spec, compiled, grammar_bytes(compiled, spec.source))

    def _compile(self, spec: GrammarSpec) -> Any:
        c, xgr = self.compiler, self._xgr
        if spec.kind == "json_object":
            return c.compile_json_schema(
                '{"type": "object"}', any_whitespace=False, strict_mode=False
            )
        if spec.kind == "json_schema":
            return c.compile_json_schema(spec.source, any_whitespace=False)
        if spec.kind == "regex":
            return c.compile_regex(spec.source)
        tag = json.loads(spec.source)
        body = xgr.Grammar.from_json_schema(json.dumps(tag["schema"]), any_whitespace=False)
        parts = [g for g in (_literal(xgr, tag["begin"]), body, _literal(xgr, tag["end"])) if g]
        return c.compile_grammar(xgr.Grammar.concat(*parts))

    def matcher(self, spec: GrammarSpec) -> Any:
        """A fresh matcher for one request."""
        return self._xgr.GrammarMatcher(self.compile(spec))

    # --- per step -----------------------------------------------------------------------
    def apply(self, logits: torch.Tensor, rows: list[int], matchers: list[Any]) -> None:
        """Mask, in place, the tokens each matcher forbids, in its row of `logits`."""
        n = logits.shape[0]
        if self._bitmask.shape[0] < n:
            self._bitmask = self._xgr.allocate_token_bitmask(n, self.vocab_size)
        bitmask = self._bitmask
        if len(rows) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, rows[0])
        else:
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, rows)
        width = logits.shape[-1]
        if logits.device.type == "cpu":
            self._xgr.apply_token_bitmask_inplace(
                logits, bitmask[:n], vocab_size=min(width, self.vocab_size), indices=rows
            )
            return
        if self._backend is None:
            self._backend = "triton" if _triton_ok() else "torch_native"
        dev_mask = bitmask[:n].to(logits.device, non_blocking=True)
        self._xgr.apply_token_bitmask_inplace(
            logits,
            dev_mask,
            vocab_size=min(width, self.vocab_size),
            indices=rows,
            backend=self._backend,  # type: ignore[arg-type]
        )

    @staticmethod
    def accept(matcher: Any, token: int) -> bool:
        """Advance `matcher` by the sampled `token`; False if the grammar forbids it."""
        return bool(matcher.accept_token(token))


def _literal(xgr: Any, text: str) -> Any:
    if not text:
        return None
    return xgr.Grammar.from_ebnf("root ::= " + json.dumps(text))


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    msg = lines[0] if lines else type(exc).__name__
    # xgrammar prefixes "[time] /path/file.cc:123: "
    if "] " in msg and ".cc:" in msg:
        msg = msg.split(".cc:", 1)[1].split(": ", 1)[-1]
    return msg
