"""A sequence's constrained decoding and sampling context, as the engine loop uses them.

A request may carry two grammars: a forced call's (its `ToolSession`'s) and
`response_format`'s. The forced call's matcher runs first and the other takes over
after the call (`events._server_call` / `tool_event` swap them); a grammar that
terminates, or a token it forbids (the tests' scripted sampler), ends the constraint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from augserve.engine.grammar import GrammarMasker
from augserve.engine.logits_processors import SampleContext
from augserve.engine.outputs import SeqState

log = logging.getLogger("augserve.engine")


class LazyMasker:
    """An engine's grammar compiler and masker, built on first use by whichever thread
    needs it first (a preparation thread compiling, the engine masking)."""

    def __init__(self) -> None:
        self.built: GrammarMasker | None = None
        self._lock = threading.Lock()

    def get(self, tokenizer: Any, vocab_size: int, stop: list[int], size: int) -> GrammarMasker:
        """The masker (`size`: the bound of its compiled grammars' bytes)."""
        with self._lock:
            if self.built is None:
                if tokenizer is None:
                    raise ValueError("constrained decoding needs a tokenizer")
                self.built = GrammarMasker(tokenizer.backend, vocab_size, stop, size)
        return self.built


def attach_grammars(st: SeqState, masker: Callable[[], GrammarMasker]) -> None:
    """A forced call's grammar (the session's) first, then response_format's."""
    forced = st.tools.grammar if st.tools is not None else None
    own = st.params.grammar
    if forced is not None:
        st.matcher = masker().matcher(forced)
        st.after_call = masker().matcher(own) if own is not None else None
    elif own is not None:
        st.matcher = masker().matcher(own)


def advance_grammar(st: SeqState, tok: int) -> None:
    """Accept the sampled token; drop the constraint when it ends or is broken."""
    m = st.matcher
    if m is None:
        return
    if not GrammarMasker.accept(m, tok):
        log.warning(
            "request %s: token %d breaks its grammar; unconstrained from here",
            st.request.request_id,
            tok,
        )
        st.matcher = None
    elif m.is_terminated():
        st.matcher = None


def sample_context(
    st: SeqState, eos_token_ids: Iterable[int], masker: GrammarMasker | None
) -> SampleContext | None:
    """What the logits processors need for this row, or None on the fast path."""
    p = st.params
    if st.matcher is None and not p.min_tokens and not p.has_penalties:
        return None
    assert st.request.token_ids is not None
    stop = p.stop_token_ids + (() if p.ignore_eos else tuple(eos_token_ids))
    return SampleContext(p, st.request.token_ids, st.gen_ids, stop, st.matcher, masker)
