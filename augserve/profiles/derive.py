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
from dataclasses import replace
from pathlib import Path

from augserve.core.latency import BatchShape, LatencyProfile
from augserve.profiles.setups import FP16_BYTES, SETUPS, Setup

PROFILE_DIR = Path(__file__).resolve().parent


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
