"""Roofline derivation of the shipped latency profiles.

Run `python -m augserve.profiles.derive` to regenerate the JSON files beside
this module (`--check` only compares, `--table` prints the derived figures).
Pure Python, deterministic: a test regenerates every file and compares text.

The model (docs/profiles.md has the full derivation and the sources):

    c0        = weights read per iteration / (HBM bw * eff_hbm_weights)
                + fixed iteration overhead + 2 * layers * allreduce latency (TP)
    c_prefill = 2 * block params / TP / (peak fp16 * mfu_prefill)
                + TP allreduce bytes per token / (link bw * eff_interconnect)
    c_attn    = 4 * layers * heads * head_dim / TP / (peak fp16 * mfu_attn)
    c_decode  = least-squares slope of the GEMM time beyond the memory-bound
                region over batch 1..max_num_seqs, + LM head row
                + per-request overhead (sampling, input preparation)
    c_ctx     = KV bytes per token / TP / (HBM bw * eff_hbm_kv)
    device KV = TP * (GPU memory * 0.9 - weights / TP - reserve)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from augserve.core.latency import BatchShape, LatencyProfile

GiB = 1024**3
FP16_BYTES = 2
PROFILE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts from the model's Hugging Face config.json."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    max_model_len: int
    gated_mlp: bool  # SwiGLU (3 matrices) vs. 2-matrix MLP
    tied_embeddings: bool
    learned_positions: int = 0  # rows of a learned position table (OPT)

    def block_params(self) -> int:
        """Weights of the transformer blocks (biases and norms ignored, < 0.1%)."""
        d, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attn = 2 * d * self.num_heads * self.head_dim + 2 * d * kv
        mlp = (3 if self.gated_mlp else 2) * d * self.ffn_size
        return self.num_layers * (attn + mlp)

    def embed_params(self) -> int:
        return (self.vocab_size + self.learned_positions) * self.hidden_size

    def head_params(self) -> int:
        """LM head matrix (computed per sequence, stored once if tied)."""
        return self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.head_params()
        return self.block_params() + self.embed_params() + head

    def kv_bytes(self) -> int:
        """2 (K and V) * layers * kv_heads * head_dim * 2 bytes (fp16)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * FP16_BYTES


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet facts for one GPU (bandwidths in bytes/s, each direction)."""

    name: str
    memory_bytes: int
    peak_fp16_flops: float  # dense tensor-core FP16, FP32 accumulate
    hbm_bandwidth: float
    host_link_bandwidth: float  # PCIe x16, one direction
    interconnect_bandwidth: float = 0.0  # NVLink per GPU, one direction; 0 if none


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak and fixed costs (docs/profiles.md justifies each)."""

    mfu_prefill: float = 0.55  # large fp16 GEMMs
    mfu_attn: float = 0.45  # FlashAttention-style prefill attention
    hbm_weights: float = 0.75  # streaming weights in decode GEMV/GEMM
    hbm_kv: float = 0.60  # paged-attention decode reading scattered KV blocks
    host_link: float = 0.70  # pinned-memory block copies over PCIe
    interconnect: float = 0.70  # NCCL ring allreduce bus bandwidth over NVLink
    iteration_overhead_s: float = 3e-3  # launches, scheduling, input prep per step
    per_request_overhead_s: float = 40e-6  # sampling + per-sequence bookkeeping
    allreduce_latency_s: float = 10e-6  # small-message allreduce (TP > 1)
    gpu_memory_utilization: float = 0.9  # vLLM default
    runtime_reserve_bytes: int = GiB  # CUDA context, cuBLAS/NCCL workspaces, graphs


@dataclass(frozen=True)
class Setup:
    """One experimental setup of the paper (section 6)."""

    name: str
    model: ModelSpec
    gpu: GpuSpec
    tp: int
    max_batch_tokens: int  # T_max
    host_swap_bytes: int  # total over all GPUs
    note: str = ""
    max_num_seqs: int = 256  # vLLM default
    eff: Efficiency = field(default_factory=Efficiency)


# --- facts ---------------------------------------------------------------------
def _llama(name: str, layers: int, d: int, heads: int, kv: int, ffn: int, vocab: int) -> ModelSpec:
    return ModelSpec(name, layers, d, heads, kv, 128, ffn, vocab, 2048, True, False)


# Fields: name, layers, hidden, heads, kv heads, head dim, ffn, vocab, max len, gated, tied.
# GPT-J-6B (EleutherAI): n_layer 28, n_embd 4096, n_head 16, rotary head dim 256.
GPTJ_6B = ModelSpec("GPT-J-6B", 28, 4096, 16, 16, 256, 16384, 50400, 2048, False, False)
# OPT-13B (Meta): 40 layers, 5120 hidden, 40 heads, ffn 20480, tied embeddings.
OPT_13B = ModelSpec("OPT-13B", 40, 5120, 40, 40, 128, 20480, 50272, 2048, False, True, 2050)
# Vicuna-13B v1.3 (LMSYS; LLaMA-13B architecture), as in INFERCEPT's runs.
VICUNA_13B = _llama("Vicuna-13B", 40, 5120, 40, 40, 13824, 32000)
# Llama-3-70B-Instruct (Meta): 80 layers, 8192 hidden, 64 heads, 8 KV heads (GQA), 8k context.
LLAMA3_70B = replace(
    _llama("Llama-3-70B-Instruct", 80, 8192, 64, 8, 28672, 128256), max_model_len=8192
)

PCIE4_X16 = 31.5e9  # 16 GT/s * 16 lanes * 128/130
PCIE5_X16 = 63.0e9
RTX_4090 = GpuSpec("RTX 4090 24 GB", 24 * GiB, 165.2e12, 1008e9, PCIE4_X16)
H800_SXM = GpuSpec("H800 SXM5 80 GB", 80 * GiB, 989.4e12, 3.35e12, PCIE5_X16, 200e9)
A100_40 = GpuSpec("A100 SXM4 40 GB", 40 * GiB, 312e12, 1555e9, PCIE4_X16, 300e9)
A100_80 = GpuSpec("A100 SXM4 80 GB", 80 * GiB, 312e12, 2039e9, PCIE4_X16, 300e9)

HOST_SWAP = 128 * GiB  # INFERCEPT's runs: --swap-space 128 (1 GPU), 64 per GPU (TP 2)

_TABLE1 = "T_max = best static budget of paper Table 1"
_VICUNA = "T_max as opt-13b-h800 (similar KV capacity); SXM4 NVLink assumed"
_LLAMA = "T_max = vLLM default 2048; 80 GB A100 assumed (70B fp16 does not fit 4 x 40 GB)"
SETUPS: tuple[Setup, ...] = (
    Setup("gptj-6b-rtx4090", GPTJ_6B, RTX_4090, 1, 500, HOST_SWAP, _TABLE1),
    Setup("opt-13b-h800", OPT_13B, H800_SXM, 1, 1500, HOST_SWAP, _TABLE1),
    Setup("vicuna-13b-2xa100", VICUNA_13B, A100_40, 2, 1500, HOST_SWAP, _VICUNA),
    Setup("llama3-70b-4xa100", LLAMA3_70B, A100_80, 4, 2048, HOST_SWAP, _LLAMA),
)


# --- derivation ----------------------------------------------------------------
def _sig(x: float, digits: int = 4) -> float:
    """Round to `digits` significant digits so the files stay readable."""
    return float(f"{x:.{digits}g}")


def weight_bytes_per_gpu(s: Setup) -> float:
    return s.model.total_params() * FP16_BYTES / s.tp


def _allreduce_per_token_s(s: Setup) -> float:
    """Two ring allreduces of one hidden vector per layer per token (Megatron TP)."""
    if s.tp == 1:
        return 0.0
    ring_bytes = 2 * (s.tp - 1) / s.tp * s.model.hidden_size * FP16_BYTES
    link = s.gpu.interconnect_bandwidth * s.eff.interconnect
    return 2 * s.model.num_layers * ring_bytes / link


def _weights_read_s(s: Setup) -> float:
    read = (s.model.block_params() + s.model.head_params()) * FP16_BYTES / s.tp
    return read / (s.gpu.hbm_bandwidth * s.eff.hbm_weights)


def _block_row_s(s: Setup) -> float:
    """Compute time of one token row through all blocks on one GPU."""
    flops = 2 * s.model.block_params() / s.tp
    return flops / (s.gpu.peak_fp16_flops * s.eff.mfu_prefill)


def derive_c0(s: Setup) -> float:
    comm = 2 * s.model.num_layers * s.eff.allreduce_latency_s if s.tp > 1 else 0.0
    return _weights_read_s(s) + s.eff.iteration_overhead_s + comm


def derive_c_prefill(s: Setup) -> float:
    return _block_row_s(s) + _allreduce_per_token_s(s)


def derive_c_attn(s: Setup) -> float:
    m = s.model
    flops = 4 * m.num_layers * m.num_heads * m.head_dim / s.tp  # QK^T and PV
    return flops / (s.gpu.peak_fp16_flops * s.eff.mfu_attn)


def derive_c_decode(s: Setup) -> float:
    """Marginal cost of one decoding request.

    A decode batch of n rows costs max(W, n * g) in the GEMMs (W: weight read,
    g: compute per row). W is in c0, so the excess is max(0, n * g - W); its
    least-squares slope through the origin over n = 1..max_num_seqs is the
    GEMM part. Plus the LM head row, TP traffic and per-request overhead.
    """
    w, g = _weights_read_s(s), _block_row_s(s)
    ns = range(1, s.max_num_seqs + 1)
    slope = sum(n * max(0.0, n * g - w) for n in ns) / sum(n * n for n in ns)
    head = 2 * s.model.head_params() / s.tp / (s.gpu.peak_fp16_flops * s.eff.mfu_prefill)
    return slope + head + _allreduce_per_token_s(s) + s.eff.per_request_overhead_s


def derive_c_ctx(s: Setup) -> float:
    return s.model.kv_bytes() / s.tp / (s.gpu.hbm_bandwidth * s.eff.hbm_kv)


def activation_reserve_bytes(s: Setup) -> int:
    """vLLM's profiling pass: max_model_len tokens of activations + logits of 256 seqs."""
    m = s.model
    mlp = (3 if m.gated_mlp else 2) * m.ffn_size // s.tp
    acts = max(m.max_model_len, s.max_batch_tokens) * (mlp + 4 * m.hidden_size) * FP16_BYTES
    logits = s.max_num_seqs * m.vocab_size * 4
    return acts + logits + s.eff.runtime_reserve_bytes


def derive_device_kv_bytes(s: Setup) -> int:
    usable = s.gpu.memory_bytes * s.eff.gpu_memory_utilization
    per_gpu = usable - weight_bytes_per_gpu(s) - activation_reserve_bytes(s)
    if per_gpu <= 0:
        raise ValueError(f"{s.name}: weights do not fit in {s.gpu.name}")
    return int(per_gpu) * s.tp


def derive_profile(s: Setup) -> LatencyProfile:
    eff = s.eff
    desc = (
        f"{s.model.name} on {s.tp} x {s.gpu.name} (TP {s.tp}); roofline-derived by "
        f"augserve.profiles.derive, not measured; {s.note}"
    )
    return LatencyProfile(
        name=s.name,
        c0=_sig(derive_c0(s)),
        c_prefill=_sig(derive_c_prefill(s)),
        c_attn=_sig(derive_c_attn(s)),
        c_decode=_sig(derive_c_decode(s)),
        c_ctx=_sig(derive_c_ctx(s)),
        kv_bytes=s.model.kv_bytes(),
        device_kv_bytes=derive_device_kv_bytes(s),
        host_kv_bytes=s.host_swap_bytes,
        swap_bandwidth=_sig(s.tp * s.gpu.host_link_bandwidth * eff.host_link),
        max_batch_tokens=s.max_batch_tokens,
        max_num_seqs=s.max_num_seqs,
        description=desc,
    )


# --- calibrated profiles ----------------------------------------------------------
# A roofline profile with every time term multiplied by one factor, fitted to the
# paper's own absolute figures on that setup by `python -m augserve.sim.calibrate`
# (docs/profiles.md, "Calibrated profiles"); `--write` rewrites this block.
# BEGIN CALIBRATED
CALIBRATED: dict[str, tuple[str, float]] = {
    "opt-13b-h800-paper": ("opt-13b-h800", 1.95),
}
# END CALIBRATED


def scaled_profile(base: LatencyProfile, name: str, scale: float) -> LatencyProfile:
    """`base` on a machine `scale` times slower: every iteration-time coefficient times
    `scale`, the host link divided by it; memory and budgets unchanged."""
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    return replace(
        base,
        name=name,
        c0=_sig(base.c0 * scale),
        c_prefill=_sig(base.c_prefill * scale),
        c_attn=_sig(base.c_attn * scale),
        c_decode=_sig(base.c_decode * scale),
        c_ctx=_sig(base.c_ctx * scale),
        swap_bandwidth=_sig(base.swap_bandwidth / scale),
        description=(
            f"{base.name} with every time term x {scale:g}: calibrated to the paper's "
            f"absolute figures by augserve.sim.calibrate (docs/profiles.md); "
            f"base: {base.description}"
        ),
    )


def roofline_profiles() -> list[LatencyProfile]:
    return [derive_profile(s) for s in SETUPS]


def calibrated_profiles() -> list[LatencyProfile]:
    roofline = {p.name: p for p in roofline_profiles()}
    return [scaled_profile(roofline[b], name, k) for name, (b, k) in CALIBRATED.items()]


def render(profile: LatencyProfile) -> str:
    """The exact text of a shipped profile file."""
    return json.dumps(profile.to_dict(), indent=2) + "\n"


def summary(p: LatencyProfile) -> dict[str, float]:
    """Figures a reader checks a profile against (ms, tokens)."""
    return {
        "decode_iter_ms": p.decode_iter_time() * 1e3,
        "decode_b64_ctx1k_ms": p.iteration_time(_decode_batch(64, 1000)) * 1e3,
        "prefill_1000_ms": p.prefill_time(1000) * 1e3,
        "kv_capacity_tokens": p.device_kv_bytes // p.kv_bytes,
        "host_capacity_tokens": p.host_kv_bytes // p.kv_bytes,
        "swap_1000_ms": p.swap_time(1000) * 1e3,
        "swap_tokens_per_iter": p.swap_tokens_per_iter(),
    }


def _decode_batch(n: int, ctx: int) -> BatchShape:
    return BatchShape(decode_reqs=n, decode_context=n * ctx)


_COLUMNS = (
    "profile|c0 ms|c_prefill us|c_attn ns|c_decode us|c_ctx ns|KV KiB/token|decode b1 ms"
    "|decode 64x1k ms|prefill 1k ms|KV tokens|host tokens|swap 1k ms|T_max"
)


def table(profiles: list[LatencyProfile]) -> str:
    """The markdown table of docs/profiles.md."""
    lines = [f"| {_COLUMNS.replace('|', ' | ')} |", "|" + "---|" * len(_COLUMNS.split("|"))]
    for p in profiles:
        f = summary(p)
        lines.append(
            f"| {p.name} | {p.c0 * 1e3:.2f} | {p.c_prefill * 1e6:.1f} | {p.c_attn * 1e9:.3f}"
            f" | {p.c_decode * 1e6:.1f} | {p.c_ctx * 1e9:.1f} | {p.kv_bytes / 1024:.0f}"
            f" | {f['decode_iter_ms']:.1f} | {f['decode_b64_ctx1k_ms']:.1f}"
            f" | {f['prefill_1000_ms']:.1f} | {f['kv_capacity_tokens']:,}"
            f" | {f['host_capacity_tokens']:,} | {f['swap_1000_ms']:.1f} | {p.max_batch_tokens} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m augserve.profiles.derive")
    ap.add_argument("--out", type=Path, default=PROFILE_DIR, help="directory for the JSON files")
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    ap.add_argument("--table", action="store_true", help="print the derived figures")
    args = ap.parse_args(argv)
    profiles = roofline_profiles() + calibrated_profiles()
    if args.table:
        print(table(profiles))
        return 0
    stale = []
    for p in profiles:
        path = args.out / f"{p.name}.json"
        text = render(p)
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(text)
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "all profiles up to date")
        return 1 if stale else 0
    print(f"wrote {len(profiles)} profiles to {args.out} ({len(stale)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
