"""ModelRunner: loads a Hugging Face model dir and executes one scheduler step.

A step is a list of `SeqChunk`s (prefill chunks, recompute chunks, return-token
prefills and single-token decodes, in any mix). The runner flattens them,
builds index tensors once, runs one forward over the paged KV cache and
samples one token for each chunk with `sample=True`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from augserve.engine.attention import AttentionMetadata, build_metadata, decode_backend
from augserve.engine.cuda_graphs import DecodeGraphs
from augserve.engine.kv_cache import KVCache, KVCacheConfig
from augserve.engine.logits_processors import SampleContext, apply_processors, needs_processing
from augserve.engine.model_build import build_model
from augserve.engine.ops import compile_regions, compile_wanted, cuda_graphs_wanted, mark_dynamic
from augserve.engine.prepack import prepack_wanted
from augserve.engine.quant import logical_numel
from augserve.engine.quant_select import default_dtype, quant_wanted
from augserve.engine.runner_config import DTYPES, RunnerConfig
from augserve.engine.sampler import Logprob, Sampler, logprobs_of
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tokenizer import read_eos_token_ids

if TYPE_CHECKING:
    from augserve.engine.native.decoder import NativeDecoder

GRAPH_MAX_BATCH = 256  # decode steps of more sequences run without a CUDA graph


@dataclass
class SeqChunk:
    """Tokens of one sequence to compute in this step."""

    seq_id: str
    token_ids: list[int]  # positions start_pos .. start_pos + len - 1
    start_pos: int  # = tokens already in this sequence's KV cache
    block_table: list[int]  # device blocks covering positions [0, start_pos + len)
    sample: bool  # sample one token from the last position's logits
    sampling: SamplingParams = field(default_factory=SamplingParams)
    context: SampleContext | None = None  # for logits processors / logprobs (None: none)


@dataclass
class StepInputs:
    """Index tensors for one step, built once and shared by all layers."""

    input_ids: torch.Tensor  # [T] flat tokens (decodes first, then prefill chunks)
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    last_idx: torch.Tensor  # [n_chunks] flat index of each chunk's last token (input order)
    sample_rows: list[int]  # chunk indices with sample=True
    sample_idx: torch.Tensor  # flat indices of their last tokens
    sample_params: list[SamplingParams]
    sample_pos: list[int]  # position of the token being sampled, per sampled chunk
    sample_ctxs: list[SampleContext | None] = field(default_factory=list)


class ModelRunner:
    """Executes steps of SeqChunks on one device with a paged KV cache."""

    def __init__(self, cfg: RunnerConfig) -> None:
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        self.device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = DTYPES[cfg.dtype] if cfg.dtype else default_dtype(self.device)
        self.quantized = quant_wanted(cfg.quantize, cfg.model_dir, cfg.dtype, self.device)
        if self.quantized:
            self.dtype = torch.bfloat16 if cfg.dtype is None else self.dtype
        self.model = build_model(cfg.model_dir, self.dtype, self.device, self.quantized)
        m = self.model
        n_params = logical_numel(m)
        self.compiled = compile_wanted(cfg.compile, n_params, self.device)
        self.prepacked = prepack_wanted(cfg.prepack, n_params, self.device, self.dtype)
        if self.prepacked:
            m.prepack()
        self._decode_forward = None
        if self.compiled:  # see run_model
            compile_regions(m.regions())
            self._decode_forward = torch.compile(m.forward, fullgraph=True)
        graphs = cuda_graphs_wanted(cfg.cuda_graphs, self.device)
        self.kv = KVCache(
            cfg.kv, m.num_layers, m.num_kv_heads, m.head_dim, self.dtype, self.device, graphs
        )
        self._graphs = self._decode_graphs() if graphs else None
        self.native = self._native_decoder()
        self.sampler = Sampler()
        self.last_logprobs: list[Logprob | None] = []  # per chunk of the last `sample`
        self.vocab_size = m.vocab_size
        self.max_model_len = m.max_model_len
        self.model_dir = cfg.model_dir

    @functools.cached_property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The model directory's EOS ids (read on first use: an engine with a tokenizer
        reads them from it and never loads the vocabulary again here)."""
        return read_eos_token_ids(self.model_dir)

    def _decode_graphs(self) -> DecodeGraphs:
        kv, bs = self.kv, self.kv.block_size
        assert kv.scratch_block is not None
        return DecodeGraphs(
            self.model, (kv.k_caches, kv.v_caches), kv.scratch_block, bs, GRAPH_MAX_BATCH,
            (self.model.max_model_len + bs - 1) // bs, self.device, self.compiled,
        )  # fmt: skip

    def _native_decoder(self) -> NativeDecoder | None:
        """Decode steps in one native call (engine/native/): quantized CPU models whose
        weights all went to the native kernels, unless compiled."""
        if not self.quantized or self.compiled or self.device.type != "cpu":
            return None
        from augserve.engine.native.decoder import NativeDecoder

        kv = self.kv
        return NativeDecoder.for_model(self.model, kv.k_caches, kv.v_caches, kv.block_size)

    @classmethod
    def from_dir(
        cls, model_dir: str | Path, dtype: str | None = None, **kv: int | None
    ) -> ModelRunner:
        """Shorthand: ModelRunner.from_dir(path, 'fp32', block_size=16, num_device_blocks=64)."""
        if "num_device_blocks" not in kv and "kv_cache_memory" not in kv:
            kv["num_device_blocks"] = 256
        return cls(RunnerConfig(str(model_dir), dtype, kv=KVCacheConfig(**kv)))  # type: ignore[arg-type]

    @property
    def num_device_blocks(self) -> int:
        return self.kv.num_device_blocks

    @property
    def num_host_blocks(self) -> int:
        return self.kv.num_host_blocks

    @property
    def block_size(self) -> int:
        return self.kv.block_size

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv.bytes_per_token

    @property
    def attention_backend(self) -> str:
        """Which decode attention runs: 'flash-attn' (CUDA), 'paged-compiled' or 'reference'."""
        return decode_backend(self.device, self.dtype, self.block_size, self.compiled)

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """(device_block, host_block) copies."""
        self.kv.swap_out(pairs)

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """(host_block, device_block) copies."""
        self.kv.swap_in(pairs)

    def _validate(self, chunks: list[SeqChunk]) -> None:
        bs = self.block_size
        for c in chunks:
            end = c.start_pos + len(c.token_ids)
            if not c.token_ids or c.start_pos < 0:
                raise ValueError(f"chunk {c.seq_id}: needs >= 1 token and start_pos >= 0")
            if end > self.max_model_len:
                raise ValueError(
                    f"chunk {c.seq_id}: {end} tokens exceed max_model_len {self.max_model_len}"
                )
            if len(c.block_table) * bs < end:
                raise ValueError(
                    f"chunk {c.seq_id}: block_table covers {len(c.block_table) * bs} < {end}"
                )

    def prepare(self, chunks: list[SeqChunk]) -> StepInputs:
        """Validate and flatten a step into index tensors (decodes first, then prefills)."""
        self._validate(chunks)
        dec = [i for i, c in enumerate(chunks) if len(c.token_ids) == 1]
        order = dec + [i for i, c in enumerate(chunks) if len(c.token_ids) != 1]
        ids: list[int] = []
        pos: list[int] = []
        decode, prefill = [], []
        last = [0] * len(chunks)
        for i in order:
            c = chunks[i]
            n = len(c.token_ids)
            ids.extend(c.token_ids)
            pos.extend(range(c.start_pos, c.start_pos + n))
            last[i] = len(ids) - 1
            if n == 1:
                decode.append((c.start_pos, c.block_table))
            else:
                prefill.append((c.start_pos, n, c.block_table))
        dev = self.device
        want = [i for i, c in enumerate(chunks) if c.sample]
        return StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.tensor(pos, dtype=torch.long, device=dev),
            meta=build_metadata(decode, prefill, self.block_size, dev, self.compiled),
            last_idx=torch.tensor(last, dtype=torch.long, device=dev),
            sample_rows=want,
            sample_idx=torch.tensor([last[i] for i in want], dtype=torch.long, device=dev),
            sample_params=[chunks[i].sampling for i in want],
            sample_pos=[chunks[i].start_pos + len(chunks[i].token_ids) for i in want],
            sample_ctxs=[chunks[i].context for i in want],
        )

    @torch.inference_mode()
    def run_model(self, inp: StepInputs) -> torch.Tensor:
        """The forward pass: hidden states [T, hidden] of all flat tokens (writes KV).

        On CUDA a step of decodes only replays a captured CUDA graph (`cuda_graphs`).
        Compiled, a step of decodes only runs as one graph (every layer, the cache
        writes and the paged kernel; one call, dynamic batch size and context width);
        a step with prefill chunks runs the layers' compiled regions around eager
        attention (one SDPA per chunk)."""
        kv, meta = self.kv, inp.meta
        if self._graphs is not None and not meta.prefills:
            out = self._graphs.run(inp.input_ids, inp.positions, meta)
            if out is not None:
                return out
        if self.native is not None and not meta.prefills:
            return self.native.decode(inp.input_ids, inp.positions, meta)
        fwd: Callable[..., torch.Tensor] = self.model
        if self._decode_forward is not None and not meta.prefills:
            fwd = self._decode_forward
            mark_dynamic(inp.input_ids, inp.positions, meta.slot_mapping, meta.decode_ctx_lens)
            mark_dynamic(meta.decode_block_tables, dims=(0, 1))
        return fwd(inp.input_ids, inp.positions, meta, kv.k_caches, kv.v_caches)

    @torch.inference_mode()
    def sample(self, hidden: torch.Tensor, inp: StepInputs, n: int) -> list[int | None]:
        """LM head on the sampled rows only, then the sampler; None for non-sampled chunks."""
        out: list[int | None] = [None] * n
        self.last_logprobs = [None] * n
        if not inp.sample_rows:
            return out
        logits = self.model.compute_logits(hidden.index_select(0, inp.sample_idx))
        want_lp = [r for r, p in enumerate(inp.sample_params) if p.logprobs is not None]
        raw = (
            logits.index_select(0, torch.tensor(want_lp, device=logits.device)) if want_lp else None
        )
        if needs_processing(inp.sample_ctxs):
            logits = logits.float()
            apply_processors(logits, inp.sample_ctxs)
        toks = self.sampler(logits, inp.sample_params, inp.sample_pos)
        for i, t in zip(inp.sample_rows, toks, strict=True):
            out[i] = t
        if raw is not None:
            k = [inp.sample_params[r].logprobs or 0 for r in want_lp]
            lps = logprobs_of(raw, [toks[r] for r in want_lp], k)
            for r, lp in zip(want_lp, lps, strict=True):
                self.last_logprobs[inp.sample_rows[r]] = lp
        return out

    @torch.inference_mode()
    def forward_logits(self, chunks: list[SeqChunk]) -> torch.Tensor:
        """fp32 logits [len(chunks), vocab] at each chunk's last position (writes KV)."""
        inp = self.prepare(chunks)
        hidden = self.run_model(inp)
        return self.model.compute_logits(hidden.index_select(0, inp.last_idx)).float()

    @torch.inference_mode()
    def execute(self, chunks: list[SeqChunk]) -> list[int | None]:
        """One step: compute all chunks, sample one token per chunk with sample=True."""
        if not chunks:
            return []
        inp = self.prepare(chunks)
        return self.sample(self.run_model(inp), inp, len(chunks))
