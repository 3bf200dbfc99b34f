"""The facts the roofline profiles are derived from: the models, the GPUs, the
efficiencies assumed, and the paper's setups (docs/profiles.md gives each source).
`augserve.profiles.derive` turns a `Setup` into a `LatencyProfile`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

GiB = 1024**3
FP16_BYTES = 2


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
