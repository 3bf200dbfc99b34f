"""The engine's GPU checks in one run: paged decode attention, swaps, throughput.

Run by `benchmarks/gpu_checks.sh` on a machine with a CUDA GPU (after the HF-parity
tests on CUDA). Three parts, each printing a table and writing JSON to --out:

1. decode attention: the compiled block-wise paged kernel (`decode_paged` under
   torch.compile: inductor's Triton code on CUDA) against the plain gather + SDPA
   reference, fp32 and bf16: relative error against an fp64 reference, median time
   (CUDA events), and the bandwidth it reaches reading the K/V it must read;
2. swaps: `KVCache.swap_out` / `swap_in` of 1 GiB of blocks through pinned host
   memory against one plain pinned copy of the same bytes (the link's ceiling);
3. throughput: ModelRunner's greedy loop against HF `generate`, same random
   0.9B-parameter Llama, bf16; eager, compiled, with CUDA graphs, and both;
   output tokens/s.

    python benchmarks/gpu_checks.py --out DIR [--parts attention,swap,throughput] [--small]

`--small` shrinks every size so that the script runs on a CPU in seconds (a smoke
test of the script itself, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from augserve.engine.attention import compiled_decode, decode_reference
from augserve.engine.kv_cache import KVCache, KVCacheConfig

RESULTS: dict[str, Any] = {}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn: Callable[[], object], dev: torch.device, reps: int = 20) -> float:
    """Median seconds of `fn` after 3 warm-ups (host clock around a device sync)."""
    for _ in range(3):
        fn()
    _sync(dev)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


# --- 1. decode attention -------------------------------------------------------------
def attention(dev: torch.device, small: bool) -> None:
    b, h, kvh, d, bs = (4, 4, 2, 16, 8) if small else (64, 32, 8, 128, 16)
    max_ctx = 64 if small else 2048
    nb = max_ctx // bs
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(max_ctx // 2, max_ctx + 1, (b,), generator=g)
    perm = torch.randperm(b * nb, generator=g)  # scattered blocks
    tables = perm.view(b, nb).to(dev)
    print(f"\n[attention] B={b} H={h} KVH={kvh} D={d} block={bs} ctx {max_ctx // 2}-{max_ctx}")
    print(f"{'dtype':<10}{'kernel':<16}{'rel err':>10}{'ms':>9}{'GB/s':>9}")
    for dtype in (torch.float32, torch.bfloat16):
        kc = torch.randn(b * nb, bs, kvh, d, generator=g).to(dev, dtype)
        vc = torch.randn(b * nb, bs, kvh, d, generator=g).to(dev, dtype)
        q = torch.randn(b, h, d, generator=g).to(dev, dtype)
        ln = lens.to(dev)
        ref = decode_reference(
            q.double(), kc.double(), vc.double(), tables, ln, d**-0.5
        )  # fp64 reference
        kv_bytes = 2 * int(lens.sum()) * kvh * d * kc.element_size()
        fns = {"reference": decode_reference, "paged-compiled": compiled_decode()}
        for name, fn in fns.items():
            out = fn(q, kc, vc, tables, ln, d**-0.5)
            err = float((out.double() - ref).norm() / ref.norm())
            assert not torch.isnan(out).any(), f"{name} left NaN"
            t = timed(partial(fn, q, kc, vc, tables, ln, d**-0.5), dev)
            gbs = kv_bytes / t / 1e9
            key = f"{str(dtype)[6:]}/{name}"
            RESULTS.setdefault("attention", {})[key] = {"rel_err": err, "ms": t * 1e3, "GBps": gbs}
            print(f"{str(dtype)[6:]:<10}{name:<16}{err:>10.2e}{t * 1e3:>9.3f}{gbs:>9.0f}")


# --- 2. swaps ------------------------------------------------------------------------
def swaps(dev: torch.device, small: bool) -> None:
    layers, kvh, d, bs, n = (2, 2, 16, 8, 16) if small else (32, 8, 128, 16, 512)
    cfg = KVCacheConfig(block_size=bs, num_device_blocks=2 * n, num_host_blocks=n)
    kv = KVCache(cfg, layers, kvh, d, torch.bfloat16, dev)
    for t in kv.k_caches + kv.v_caches:
        t.normal_()
    nbytes = 2 * layers * n * bs * kvh * d * 2
    src = list(range(0, 2 * n, 2))  # every other device block
    out_pairs = list(zip(src, range(n), strict=True))
    in_pairs = list(zip(range(n), range(1, 2 * n, 2), strict=True))
    t_out = timed(lambda: kv.swap_out(out_pairs), dev, reps=5)
    t_in = timed(lambda: kv.swap_in(in_pairs), dev, reps=5)
    ok = all(
        torch.equal(t[1::2], t[0::2]) for t in kv.k_caches + kv.v_caches
    )  # every swapped-in block equals the one swapped out
    host = torch.randperm(n).tolist()  # host blocks scattered: the staging path
    out_s = list(zip(src, host, strict=True))
    in_s = list(zip(host, range(1, 2 * n, 2), strict=True))
    t_out_s = timed(lambda: kv.swap_out(out_s), dev, reps=5)
    t_in_s = timed(lambda: kv.swap_in(in_s), dev, reps=5)
    ok = ok and all(torch.equal(t[1::2], t[0::2]) for t in kv.k_caches + kv.v_caches)
    flat = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev)
    pool = torch.empty(nbytes // 2, dtype=torch.bfloat16, pin_memory=dev.type == "cuda")
    t_d2h = timed(lambda: pool.copy_(flat, non_blocking=True), dev, reps=5)
    t_h2d = timed(lambda: flat.copy_(pool, non_blocking=True), dev, reps=5)
    gb = nbytes / 1e9
    RESULTS["swap"] = {
        "bytes": nbytes, "blocks": n, "layers": layers, "bit_exact": ok,
        "swap_out_GBps": gb / t_out, "swap_in_GBps": gb / t_in,
        "swap_out_scattered_GBps": gb / t_out_s, "swap_in_scattered_GBps": gb / t_in_s,
        "pinned_d2h_GBps": gb / t_d2h, "pinned_h2d_GBps": gb / t_h2d,
    }  # fmt: skip
    print(f"\n[swap] {n} blocks x {layers} layers, {gb:.2f} GB, bit-exact round trip: {ok}")
    print(f"swap_out {gb / t_out:6.1f} GB/s (host blocks scattered {gb / t_out_s:6.1f})   "
          f"one pinned D2H copy {gb / t_d2h:6.1f} GB/s")  # fmt: skip
    print(f"swap_in  {gb / t_in:6.1f} GB/s (host blocks scattered {gb / t_in_s:6.1f})   "
          f"one pinned H2D copy {gb / t_h2d:6.1f} GB/s")  # fmt: skip


# --- 3. throughput -------------------------------------------------------------------
def _model_dir(small: bool) -> Path:
    from augserve.engine.make_model import make_model

    root = Path(tempfile.mkdtemp())
    if small:
        return make_model("llama", "tiny", root / "m", untied=True)
    size = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16,
                num_key_value_heads=8, intermediate_size=5632)  # fmt: skip
    return make_model("llama", "100m", root / "m", overrides=size, untied=True)


def throughput(dev: torch.device, small: bool, deadline: float) -> None:
    from transformers import AutoModelForCausalLM

    import benchmarks.bench_engine_throughput as bet
    from augserve.engine.model_runner import ModelRunner
    from augserve.engine.runner_config import RunnerConfig

    bet.CLOCK = lambda: (_sync(dev), time.perf_counter())[1]
    d = _model_dir(small)
    work = [(1, 512, 64), (16, 512, 64), (64, 128, 128)] if not small else [(2, 16, 4)]
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.bfloat16).to(dev).eval()
    n_params = sum(p.numel() for p in hf.parameters())
    print(f"\n[throughput] random Llama {n_params / 1e9:.2f}B params, bf16, output tok/s")
    print(f"{'workload':<22}{'mode':<17}{'ours':>10}{'HF':>10}{'ratio':>8}")
    kv = KVCacheConfig(block_size=16, num_device_blocks=64 * 48 if not small else 64)
    modes = {"eager": (False, False), "graphs": (False, True), "compiled": (True, False),
             "compiled+graphs": (True, True)}  # fmt: skip
    for mode, (compile, graphs) in modes.items():
        if time.time() > deadline:
            print(f"deadline reached: {mode} skipped")
            continue
        cfg = RunnerConfig(str(d), "bf16", str(dev), kv, compile=compile, cuda_graphs=graphs)
        runner = ModelRunner(cfg)
        for batch, plen, steps in work:
            prompts = bet._prompts(batch, plen, runner.vocab_size)
            bet.ours_generate(runner, prompts, 3)  # warm-up (and compile)
            if mode == "eager":
                bet.hf_generate(hf, prompts, 3)
            best = [0.0, 0.0]
            for _ in range(2):
                st = bet.ours_generate(runner, prompts, steps)
                best[0] = max(best[0], batch * steps / (st[-1] - st[0]))
                if mode == "eager":
                    st = bet.hf_generate(hf, prompts, steps)
                    best[1] = max(best[1], batch * steps / (st[-1] - st[0]))
            hf_tps = best[1] or RESULTS.get("throughput", {}).get(f"{batch}x{plen}/eager", {}).get(
                "hf", float("nan")
            )
            RESULTS.setdefault("throughput", {})[f"{batch}x{plen}/{mode}"] = {
                "ours": best[0], "hf": hf_tps, "out_tokens": steps,
            }  # fmt: skip
            row = f"{batch} x {plen}, {steps} out"
            print(f"{row:<22}{mode:<17}{best[0]:>10.1f}{hf_tps:>10.1f}{best[0] / hf_tps:>8.2f}")
        del runner
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--parts", default="attention,swap,throughput")
    p.add_argument("--small", action="store_true")
    p.add_argument("--budget-s", type=float, default=300.0, help="stop starting new parts after")
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    deadline = time.time() + a.budget_s
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    RESULTS["env"] = {"torch": torch.__version__, "device": name}
    print(f"torch {torch.__version__} on {name}")
    parts = {"attention": attention, "swap": swaps}
    for part in a.parts.split(","):
        t0 = time.time()
        try:
            if part == "throughput":
                throughput(dev, a.small, deadline)
            else:
                parts[part](dev, a.small)
        except Exception as e:  # noqa: BLE001 - report and go on to the next part
            RESULTS.setdefault("errors", {})[part] = repr(e)
            print(f"[{part}] FAILED: {e!r}")
        print(f"[{part}] {time.time() - t0:.0f} s", flush=True)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "gpu_checks.json").write_text(json.dumps(RESULTS, indent=2))


if __name__ == "__main__":
    main()
