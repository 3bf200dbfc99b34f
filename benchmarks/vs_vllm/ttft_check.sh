#!/usr/bin/env bash
# `vllm bench serve` (vLLM's CPU env, setup_env.sh) against `augserve serve`: the TTFT
# vLLM's client measures (first SSE chunk) beside the one augserve's metrics record
# (first token, /metrics: augserve_time_to_first_token_seconds). They should agree
# within 10%: the first chunk goes out with the first token.
#   benchmarks/vs_vllm/ttft_check.sh [NUM_PROMPTS] [INPUT_LEN]   (defaults 20, 600)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VLLM_VENV:-$here/.venv-vllm}"
n="${1:-20}"; len="${2:-600}"; port="${PORT:-8011}"
out="$(mktemp -d)"
bash "$here/setup_env.sh" "$venv" >/dev/null
augserve="${AUGSERVE:-$root/.venv/bin/augserve}"
model="$("$root/.venv/bin/python" -c 'from augserve.server.default_model import default_model as d; print(d()[0])')"
"$augserve" serve --port "$port" --max-model-len 2048 --log-level warning &
pid=$!; trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
until curl -sf "localhost:$port/health" >/dev/null; do sleep 1; done
metrics() { curl -s "localhost:$port/metrics" | grep -E '^augserve_time_to_first_token_seconds_(sum|count)'; }
warm='{"model": "augserve-default", "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 4}'
curl -sf "localhost:$port/v1/chat/completions" -H 'content-type: application/json' -d "$warm" >/dev/null
metrics > "$out/before.txt"  # vLLM's own test request (one more) is in the difference
"$venv/bin/vllm" bench serve --backend openai-chat --endpoint /v1/chat/completions \
  --base-url "http://127.0.0.1:$port" --model augserve-default --tokenizer "$model" \
  --dataset-name random --random-input-len "$len" --random-output-len 16 \
  --num-prompts "$n" --max-concurrency 1 --ignore-eos \
  --save-result --save-detailed --result-dir "$out" --result-filename vllm.json 2>&1 \
  | grep -E "TTFT|Successful"
metrics > "$out/after.txt"
"$root/.venv/bin/python" - "$out" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
res = json.loads((out / "vllm.json").read_text())
ttfts = res["ttfts"]
def read(name):
    vals = dict(line.split()[:2] for line in (out / name).read_text().splitlines())
    return (sum(float(v) for k, v in vals.items() if k.endswith("_sum")),
            sum(float(v) for k, v in vals.items() if k.endswith("_count")))
(s0, c0), (s1, c1) = read("before.txt"), read("after.txt")
theirs, ours = statistics.mean(ttfts), (s1 - s0) / (c1 - c0)
print("vllm bench serve TTFTs (s):", " ".join(f"{t:.3f}" for t in ttfts))
print(f"vllm bench serve mean TTFT {theirs:.3f} s over {len(ttfts)}; augserve's metrics "
      f"{ours:.3f} s over {c1 - c0:.0f} (with vLLM's test request); ratio {theirs / ours:.3f} "
      f"({'within' if abs(theirs / ours - 1) <= 0.10 else 'NOT within'} 10%)")
PY
