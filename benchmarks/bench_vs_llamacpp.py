"""augserve against llama.cpp's server on the same GGUF file, through each one's OpenAI API.

Both servers run the same file with the same threads, one after the other, rotated for
`--rounds` rounds (best of the rounds per metric): batch-1 decode tok/s (a 128-token
completion, streamed, timed from the first token), prefill of a ~512-token prompt
(a 1-token completion), 8 concurrent 128 -> 128 completions (aggregate tok/s), and
the server's resident memory after load. Beside them, the bandwidth limit of decode:
the bytes of weights one token reads over the measured read bandwidth of this machine.

Greedy agreement (teacher-forced, 256 tokens of held-out text): the fraction of
positions where a runtime's argmax equals the fp32 dequantized model's (augserve
`--dtype fp32`, in process): augserve's quantized path in process, llama.cpp through
its `/completion` endpoint (one request per position, its prompt cache makes each one
token of work).

Models: SmolLM2-135M-Instruct Q4_1 (augserve's default model) and, with `--big`, a
random Qwen2-shaped model of ~0.5B parameters written here with the `gguf` package,
quantized to Q4_0. llama.cpp: `--llama-server PATH`, else $LLAMA_SERVER, else
`llama-server` on PATH; how to build it: docs/engine-quant.md ("Building
llama.cpp's server (the route taken here)"). Without one, only augserve's side is
measured.

    python benchmarks/bench_vs_llamacpp.py [--threads 2] [--rounds 3] [--big]
        [--llama-server PATH] [--out docs/data/vs-llamacpp.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from augserve.bench.report import git_commit, write_json

HELD_OUT = (
    "The lighthouse keeper climbed the narrow stairs every evening at dusk. From the top "
    "he could see the fishing boats returning to the harbour, their lanterns swinging "
    "with the waves. In winter the storms came from the north, and the glass rattled in "
    "its iron frame, but the lamp never went out. His daughter kept a notebook of every "
    "ship that passed: its name, its flag, the hour it rounded the point. Years later, "
    "when the light was automated and the keeper's cottage became a museum, the notebook "
    "was found in a drawer of the kitchen table, its pages filled with small careful "
    "handwriting. Historians used it to reconstruct the trade of the little port, which "
    "had shipped salt, wool and dried fish to the cities of the south for three hundred "
    "years. Visitors today can read a copy of it in the room where it was written, and "
    "on clear nights the beam still sweeps across the water, once every twelve seconds, "
    "as it has since the first lamp was lit."
)
PREFILL_TEXT = " ".join([HELD_OUT] * 3)
PREFILL_TOKENS = 512  # llama.cpp's slots hold 8192 / 8 = 1024 tokens each
BIG = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
           num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
           max_position_embeddings=4096, tie_word_embeddings=True)  # fmt: skip


def find_llama_server(given: str | None) -> str | None:
    for cand in (given, os.environ.get("LLAMA_SERVER"), shutil.which("llama-server")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def read_bandwidth_gbs(size: int = 512 * 2**20, reps: int = 5) -> float:
    """GB/s of summing a 512 MiB array (best of `reps`), a stand-in for DRAM read speed."""
    a = np.ones(size // 8, dtype=np.float64)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return size / best / 1e9


def decode_bytes_per_token(gguf_path: Path) -> int:
    """Weight bytes one decode token reads: every matrix but the embedding, whose rows are
    looked up; a tied embedding is read whole once as the LM head."""
    import gguf

    r = gguf.GGUFReader(str(gguf_path))
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    n = sum(v for k, v in sizes.items() if k != "token_embd.weight")
    return n + (sizes["token_embd.weight"] if "output.weight" not in sizes else 0)


def kv_bytes(gguf_path: Path, tokens: int = 8192) -> int:
    """Bytes of a 16-bit KV cache of `tokens` tokens (both servers hold 8192: augserve's
    512 blocks of 16, llama.cpp's `-c 8192` in f16)."""
    import gguf

    r = gguf.GGUFReader(str(gguf_path))
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def val(key: str) -> int:
        return int(r.fields[f"{arch}.{key}"].parts[-1][0])

    heads, hidden = val("attention.head_count"), val("embedding_length")
    kv_heads = (
        val("attention.head_count_kv") if f"{arch}.attention.head_count_kv" in r.fields else heads
    )
    return val("block_count") * 2 * kv_heads * (hidden // heads) * 2 * tokens


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Server:
    """One server process on `port`, stopped on exit."""

    def __init__(self, cmd: list[str], port: int, log: Path) -> None:
        self.cmd, self.port, self.url = cmd, port, f"http://127.0.0.1:{port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        fh = self.log.open("ab")
        self.proc = subprocess.Popen(self.cmd, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[0]} exited {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"{self.cmd[0]} not ready in 30 min; see {self.log}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _body(prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": stream}  # fmt: skip


async def _stream(
    client: httpx.AsyncClient, url: str, prompt: str, n: int
) -> tuple[float, float, int]:
    """(time to first token, time from first to last token, tokens) of one streamed request."""
    t0 = time.perf_counter()
    first = last = 0.0
    count = 0
    async with client.stream("POST", url + "/v1/completions", json=_body(prompt, n, True)) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            now = time.perf_counter()
            first = first or now
            last = now
            count += 1
    return first - t0, last - first, count


def prefill_text(model_dir: Path, tokens: int = PREFILL_TOKENS) -> str:
    """The longest run of PREFILL_TEXT's words that is at most `tokens` tokens for this
    model's tokenizer (a random model's small BPE makes the whole text ~1600 tokens)."""
    from augserve.engine.tokenizer import Tokenizer

    tok, words = Tokenizer(model_dir), PREFILL_TEXT.split(" ")
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tok.encode(" ".join(words[:mid]))) <= tokens else (lo, mid - 1)
    return " ".join(words[:lo])


async def _measure(url: str, prefill: str) -> dict[str, float]:
    # no keep-alive: llama.cpp's server closes a connection after a streamed response, and
    # a request sent on such a connection fails (RemoteProtocolError)
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as c:
        await _stream(c, url, "Hello", 8)  # warm up
        _, dt, n = await _stream(c, url, "Once upon a time", 128)
        t0 = time.perf_counter()
        r = await c.post(url + "/v1/completions", json=_body(prefill, 1, False))
        prefill_s = time.perf_counter() - t0
        prompt_tokens = r.json()["usage"]["prompt_tokens"]
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(_stream(c, url, f"Story {i}: " + HELD_OUT[:400], 128)
                                      for i in range(8)))  # fmt: skip
        wall = time.perf_counter() - t0
    return {"decode_tok_s": (n - 1) / dt, "prefill_s": prefill_s, "prefill_tokens": prompt_tokens,
            "concurrent8_tok_s": sum(o[2] for o in outs) / wall}  # fmt: skip


def augserve_cmd(gguf_path: Path, port: int, threads: int) -> list[str]:
    return [sys.executable, "-m", "augserve", "serve", "--model", str(gguf_path),
            "--port", str(port), "--threads", str(threads), "--max-num-seqs", "8",
            "--served-model-name", "m", "--profile", "default"]  # fmt: skip


def llama_cmd(exe: str, gguf_path: Path, port: int, threads: int) -> list[str]:
    return [exe, "-m", str(gguf_path), "--port", str(port), "-t", str(threads), "-tb",
            str(threads), "--parallel", "8", "-c", str(8 * 1024), "--no-webui"]  # fmt: skip


def ids_of(text: str, model_dir: Path, n: int) -> list[int]:
    from augserve.engine.tokenizer import Tokenizer

    return Tokenizer(model_dir).encode(text)[:n]


def argmax_in_process(
    model_dir: Path, ids: list[int], dtype: str | None, threads: int, decode: bool = False
) -> list[int]:
    """Teacher-forced argmax at every position through the engine's runner: one prefill of
    the whole text, or (`decode`) one decode step a token, the path generation takes
    (the native fused step for a quantized model)."""
    import torch

    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner, SeqChunk
    from augserve.engine.runner_config import RunnerConfig

    kv = KVCacheConfig(block_size=16, num_device_blocks=(len(ids) + 15) // 16 + 1)
    r = ModelRunner(RunnerConfig(str(model_dir), dtype, "cpu", kv, threads, compile=False))
    blocks = list(range((len(ids) + r.block_size - 1) // r.block_size))
    if decode:
        return [int(r.forward_logits([SeqChunk("agree", [t], i, blocks, True)]).argmax())
                for i, t in enumerate(ids)]  # fmt: skip
    step = r.prepare([SeqChunk("agree", ids, 0, blocks, sample=True)])
    with torch.no_grad():
        hidden = r.model(step.input_ids, step.positions, step.meta, r.kv.k_caches, r.kv.v_caches)
        return [int(t) for t in r.model.compute_logits(hidden).argmax(-1)]


def argmax_llama(url: str, ids: list[int]) -> list[int]:
    out = []
    with httpx.Client(timeout=600) as c:
        for i in range(1, len(ids) + 1):
            body = {"prompt": ids[:i], "n_predict": 1, "temperature": 0.0, "cache_prompt": True,
                    "n_probs": 1, "return_tokens": True}  # fmt: skip
            j = c.post(url + "/completion", json=body).json()
            toks = j.get("tokens") or [j["completion_probabilities"][0]["id"]]
            out.append(int(toks[0]))
    return out


def agreement(a: list[int], ref: list[int]) -> float:
    return sum(x == y for x, y in zip(a, ref, strict=True)) / len(ref)


def big_gguf(root: Path) -> Path:
    """A random Qwen2-shaped model of ~0.5B parameters as a Q4_0 GGUF (written once)."""
    import gguf

    from augserve.engine.gguf_write import write_gguf
    from augserve.engine.make_model import make_model

    out = root / "random-qwen2-0.5b.Q4_0.gguf"
    if not out.is_file():
        d = make_model("qwen2", "small", root / "random-qwen2-0.5b", seed=0, overrides=BIG)
        write_gguf(d, out, qtype=gguf.GGMLQuantizationType.Q4_0, arch="qwen2")
        shutil.rmtree(d)
    return out


def run_file(path: Path, llama: str | None, a: argparse.Namespace) -> list[dict[str, Any]]:
    from augserve.engine.resolve import resolve_model

    rows: dict[str, dict[str, Any]] = {}
    model_dir = Path(resolve_model(path))
    prefill = prefill_text(model_dir)
    systems = [("augserve", augserve_cmd(path, a.port, a.threads))]
    if llama:
        systems.append(("llama.cpp", llama_cmd(llama, path, a.port + 1, a.threads)))
    for rnd in range(a.rounds):
        for name, cmd in systems[rnd % 2 :] + systems[: rnd % 2]:  # rotated
            port = int(cmd[cmd.index("--port") + 1])
            best = rows.setdefault(name, {"model": path.name, "system": name})
            try:
                with Server(cmd, port, Path(a.log)) as srv:
                    assert srv.proc is not None
                    rss = rss_of(srv.proc.pid)
                    got = {**asyncio.run(_measure(srv.url, prefill)), "rss_after_load_bytes": rss}
            except (httpx.HTTPError, RuntimeError) as exc:  # recorded; the other rounds go on
                best.setdefault("failed_rounds", []).append(f"round {rnd}: {exc!r}")
                print(name, path.name, "round", rnd, "FAILED:", repr(exc), flush=True)
                continue
            best.setdefault("rounds", []).append({"round": rnd, **got})
            for k, v in got.items():
                lower = k in ("prefill_s", "rss_after_load_bytes")
                old = best.get(k)
                best[k] = v if old is None else (min(old, v) if lower else max(old, v))
            print(
                name, path.name, "round", rnd, {k: round(v, 3) for k, v in got.items()}, flush=True
            )
    print("greedy agreement over", a.agree_tokens, "tokens", flush=True)
    ids = ids_of(HELD_OUT * 2, model_dir, a.agree_tokens)
    ref = argmax_in_process(model_dir, ids, "fp32", a.threads)
    rows["augserve"]["greedy_agreement_vs_fp32"] = agreement(
        argmax_in_process(model_dir, ids, None, a.threads), ref
    )
    rows["augserve"]["greedy_agreement_decode_vs_fp32"] = agreement(
        argmax_in_process(model_dir, ids, None, a.threads, decode=True), ref
    )
    if llama:
        try:
            with Server(
                llama_cmd(llama, path, a.port + 1, a.threads), a.port + 1, Path(a.log)
            ) as s:
                rows["llama.cpp"]["greedy_agreement_vs_fp32"] = agreement(
                    argmax_llama(s.url, ids), ref
                )
        except (httpx.HTTPError, RuntimeError) as exc:
            rows["llama.cpp"].setdefault("failed_rounds", []).append(f"agreement: {exc!r}")
    bpt, kv = decode_bytes_per_token(path), kv_bytes(path)
    for row in rows.values():
        row["decode_bytes_per_token"] = bpt
        row["file_bytes"] = path.stat().st_size
        row["kv_bytes_8192_tokens"] = kv
        if "rss_after_load_bytes" in row:
            row["rss_over_file_plus_kv"] = row["rss_after_load_bytes"] / (row["file_bytes"] + kv)
    return list(rows.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--port", type=int, default=8500)
    p.add_argument("--big", action="store_true", help="also the random ~0.5B Q4_0 model")
    p.add_argument("--llama-server", default=None)
    p.add_argument("--agree-tokens", type=int, default=256)
    p.add_argument("--work", default="/tmp/augserve-vs-llamacpp")
    p.add_argument("--log", default="/tmp/augserve-vs-llamacpp/servers.log")
    p.add_argument("--out", default="docs/data/vs-llamacpp.json")
    p.add_argument(
        "--note", default="", help="recorded with the data (e.g. how busy the machine was)"
    )
    a = p.parse_args()
    Path(a.work).mkdir(parents=True, exist_ok=True)
    from augserve.engine.smollm2 import ensure_smollm2_gguf

    llama = find_llama_server(a.llama_server)
    print("llama-server:", llama or "not found (augserve only)", flush=True)
    files = [ensure_smollm2_gguf()] + ([big_gguf(Path(a.work))] if a.big else [])
    load0, t_start = os.getloadavg(), time.perf_counter()
    bw = read_bandwidth_gbs()
    rows: list[dict[str, Any]] = []
    for f in files:  # the file is rewritten after each model: a later failure keeps these
        for row in run_file(f, llama, a):
            row["bandwidth_limit_tok_s"] = bw * 1e9 / row["decode_bytes_per_token"]
            rows.append(row)
            print(row, flush=True)
        write_result(a, rows, llama, load0, t_start, bw)
    print("wrote", a.out)


def write_result(
    a: argparse.Namespace, rows: list[dict[str, Any]], llama: str | None,
    load0: tuple[float, float, float], t_start: float, bw: float,
) -> None:  # fmt: skip
    from augserve.engine.native.build import available, isa
    from augserve.engine.quant_select import cpu_flags

    write_json(
        a.out, rows, command="python benchmarks/bench_vs_llamacpp.py " + " ".join(sys.argv[1:]),
        commit=git_commit(), date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        loadavg_before=load0, loadavg_after=os.getloadavg(), read_bandwidth_GBps=bw,
        threads=a.threads, llama_server=llama,
        cpu_flags=" ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni",
                                       "amx_tile") if f in cpu_flags()),
        wall_s=time.perf_counter() - t_start, note=a.note,
        augserve_kernels=isa() if available() else "torch",
    )  # fmt: skip


if __name__ == "__main__":
    main()
