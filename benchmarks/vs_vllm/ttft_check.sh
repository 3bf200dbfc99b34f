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
model="$("$root/.venv/bin/python" -c 'from augserve.server.default_model import ensure_default_model as e; print(e())')"
"$augserve" serve --port "$port" --max-model-len 2048 --log-level warning &
pid=$!; trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
until curl -sf "localhost:$port/health" >/dev/null; do sleep 1; done
"$venv/bin/vllm" bench serve --backend openai-chat --endpoint /v1/chat/completions \
  --base-url "http://127.0.0.1:$port" --model augserve-default --tokenizer "$model" \
  --dataset-name random --random-input-len "$len" --random-output-len 16 \
  --num-prompts "$n" --max-concurrency 1 --ignore-eos \
  --save-result --result-dir "$out" --result-filename vllm.json 2>&1 | grep -E "TTFT|Successful"
curl -s "localhost:$port/metrics" | grep -E '^augserve_time_to_first_token_seconds_(sum|count)' > "$out/ours.txt"
"$root/.venv/bin/python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
theirs = json.loads((out / "vllm.json").read_text())["mean_ttft_ms"] / 1e3
vals = dict(line.split()[:2] for line in (out / "ours.txt").read_text().splitlines())
s = sum(float(v) for k, v in vals.items() if k.endswith("_sum"))
c = sum(float(v) for k, v in vals.items() if k.endswith("_count"))
ours = s / c
print(f"vllm bench serve mean TTFT {theirs:.3f} s; augserve's metrics {ours:.3f} s; "
      f"ratio {theirs / ours:.3f} ({'within' if abs(theirs / ours - 1) <= 0.10 else 'NOT within'} 10%)")
PY
